"""The presentation floor: what a chapter does with its numbers, above every numerical floor.

* :func:`state` glues a computed number into the prose (``{glue:text}`name``) and returns it formatted;
  :func:`counted` words a count with its noun ("no values", "one check");
* :data:`check` checks a claim stated once, as a comparison of numbers, with its margin; :func:`ledger`, the
  chapter's last code cell, shows every check as one folded block and stores them for :func:`read_ledger`;
* :func:`markdown_table`, :func:`frame_table`, :func:`summary_table`: captioned tables;
* :func:`figure` and :func:`show`: a figure whose title is the question it answers, refused when a reader would
  see a defect in it (:func:`figure_defects`), glued for a captioned ``{glue:figure}``; :func:`plain_ticks` labels
  an axis 10, 20, 50 rather than with powers of ten.

Nothing in the numerical floors imports this one (``import-linter`` holds it). Outside a notebook (plain Python)
gluing and display are skipped and values are returned.
"""

from __future__ import annotations

from ..words import counted
from .checks import EMPHASIS, EQUALITY_MARGIN, LEDGER_KEY, Check, LedgerEntry, check, ledger, read_ledger
from .figures import figure, figure_defects, plain_ticks, show
from .glue import read_states, state
from .tables import Table, frame_table, markdown_table, summary_table

__all__ = ["EMPHASIS", "EQUALITY_MARGIN", "LEDGER_KEY", "Check", "LedgerEntry", "Table", "check", "counted", "figure",
           "figure_defects", "frame_table", "ledger", "markdown_table", "plain_ticks", "read_ledger", "read_states",
           "show", "state", "summary_table"]
