"""One vertical slice per operator: api (validation, plan, kernel call), kernel, simulator, reference."""
