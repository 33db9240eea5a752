"""The long-range probe: tasks whose labels are decided far from the pixel they label.

:mod:`.tasks` draws the images and their labels, :mod:`.metric` scores a run by distance and hop
count, :mod:`.sweep` trains the runs of a setting and keeps their rows, and :mod:`.report` turns the
rows into ``docs/long_range.md`` (``tools/long_range.py`` is the command line of all four).
"""
