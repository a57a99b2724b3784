"""A progress bar for the long commands (``normkern warmup``, ``normkern bench``): tqdm's, where the
``progress`` extra is installed (shown on a terminal only), else lines alone."""

from __future__ import annotations

import sys


class Lines:
    """The part of tqdm's interface the commands use, without a bar."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def set_description_str(self, text: str) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass

    @staticmethod
    def write(line: str, file=None) -> None:
        print(line, file=file or sys.stdout, flush=True)


def progress(total: int, unit: str = "call"):
    """A bar of ``total`` steps on stderr, or ``Lines``."""
    try:
        from tqdm import tqdm
    except ImportError:
        return Lines()
    return tqdm(total=total, unit=unit, disable=None, file=sys.stderr, dynamic_ncols=True)
