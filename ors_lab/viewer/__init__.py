"""The viewer: what every view shows, as plain data folded from events, and the pages drawn from it.

The view states, the standalone page shell, the report and the bundled JavaScript: one front end
for the notebook's widgets, ``ors-lab report`` and ``ors-lab watch``. Nothing here imports a widget
library; ``ors_lab.notebook`` (the layer above) draws these states live.
"""
