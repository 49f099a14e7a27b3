"""Campaign progress: on a terminal one rich bar and a line per finished cell; elsewhere (a CI
log, a pipe) a plain line every 10 % (simconform/progress.py Lines) and one per failed cell."""

from __future__ import annotations

import sys
from collections import Counter

SYMBOL = {
    "pass": "[green]✓[/]",
    "fail": "[bold red]✗[/]",
    "inconclusive": "[yellow]?[/]",
    "not_applicable": "[dim]-[/]",
    "crashed": "[bold red]☠[/]",
    "error": "[bold red]![/]",
    "not_run": "[dim]·[/]",
}


class CampaignProgress:
    """One rich bar for the campaign, a line per finished cell; plain lines when not a
    terminal (enabled None); nothing when enabled is False."""

    def __init__(self, total: int, resumed, enabled: bool | None) -> None:
        from simconform.progress import Lines

        self.counts: Counter[str] = Counter(r["status"] for r in resumed)
        self.total = total
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.p = None
        self.lines = Lines(total, "campaign") if enabled is None and not self.enabled else None

    def __enter__(self) -> CampaignProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.p = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True, highlight=False),
                transient=False,
            )
            self.p.start()
            self.task = self.p.add_task(self._desc(), total=self.total, completed=self.total_done)
            if self.total_done:
                self.p.console.print(f"resuming: {self.total_done} cells already done")
        return self

    @property
    def total_done(self) -> int:
        return sum(self.counts.values())

    def _desc(self) -> str:
        parts = [f"{SYMBOL[s]}{n}" for s, n in sorted(self.counts.items())]
        return "campaign " + " ".join(parts)

    def done(self, rec: dict) -> None:
        from rich.markup import escape

        self.counts[rec["status"]] += 1
        if self.lines is not None:
            if rec["status"] in ("fail", "crashed", "error"):
                err = f" ({rec['error']})" if rec.get("error") else ""
                sys.stderr.write(f"simconform: campaign: {rec['id']}: {rec['status']}{err}\n")
            self.lines.update(self.total_done)
        if self.p is None:
            return
        wall = f" {rec['wall_s']:.1f} s" if rec.get("wall_s") else ""
        note = f" ({escape(str(rec['error']))})" if rec.get("error") else ""
        tries = f", attempt {rec['attempts']}" if rec["attempts"] > 1 else ""
        self.p.console.print(
            f"{SYMBOL[rec['status']]} {rec['id']}: {rec['status']}{wall}{tries}{note}"
        )
        self.p.update(self.task, completed=self.total_done, description=self._desc())

    def __exit__(self, *exc) -> None:
        if self.p is not None:
            self.p.stop()
