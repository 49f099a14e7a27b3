"""A progress bar on a terminal; nothing elsewhere."""

from __future__ import annotations

import sys


class Bar:
    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, Progress, TimeRemainingColumn

        self.p = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            "{task.percentage:>3.0f}%",
            TimeRemainingColumn(),
            transient=True,
        )
        self.p.start()
        self.task = self.p.add_task("capturing", total=total)

    def update(self, done: int) -> None:
        self.p.update(self.task, completed=done)

    def close(self) -> None:
        self.p.stop()


def progress_bar(total: int, enabled: bool | None) -> Bar | None:
    if enabled is None:
        enabled = sys.stderr.isatty()
    return Bar(total) if enabled else None
