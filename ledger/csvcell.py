"""CSV cells a spreadsheet will not run as a formula (OWASP, "CSV Injection").

Excel, LibreOffice and Google Sheets read a cell whose text starts with `=`, `+`, `-`, `@`, a tab or a carriage
return as a formula (`=HYPERLINK(...)`, `@SUM(...)`, `-2+3+cmd|' /C calc'!A0`), and text a client chose (a
tenant name, a request id, a rejection reason) reaches ledger exports and SLO reports. Such a text gets a single
quote in front, which the spreadsheet shows as text. A number is left as it is: a negative budget or a figure
below zero is a number the spreadsheet reads as one, whether it comes as a float or as its plain text ("-3.7").
"""
from __future__ import annotations

import re
from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?|[-+]?inf")


def safe_cell(value: Any) -> Any:
    """`value`, or for a text a spreadsheet would evaluate, that text behind a single quote."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value
