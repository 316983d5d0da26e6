"""Tables of a model's layers, as text or as a rich renderable: a summary's rows, a profile's."""

from __future__ import annotations

from rich.table import Table


def plain_table(header: tuple[str, ...], body: list[tuple[str, ...]], foot: list[tuple[str, ...]], left: int) -> str:
    """Aligned text columns (the first `left` to the left, the rest to the right), a rule above
    and below the body (`nasir.summary.Summary` and `nasir.runtime.profile.Profile` print themselves with it)."""
    table = [header, *body, *foot]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        cols = [c.ljust(w) for c, w in zip(cells[:left], widths)]
        cols += [c.rjust(w) for c, w in zip(cells[left:], widths[left:])]
        return "  ".join(cols).rstrip()

    rule = "-" * len(line(tuple("-" * w for w in widths)))
    return "\n".join([line(header), rule, *map(line, body), rule, *map(line, foot)])


def rich_table(header: tuple[str, ...], body: list[tuple[str, ...]], foot: list[tuple[str, ...]], left: int):
    """`plain_table`'s layout as a rich Table: the foot rows bold below a rule; long cells wrap."""
    table = Table()
    for i, head in enumerate(header):
        table.add_column(head, justify="right" if i >= left else "left", overflow="fold")
    for row in body:
        table.add_row(*row)
    table.add_section()
    for row in foot:
        table.add_row(*row, style="bold")
    return table
