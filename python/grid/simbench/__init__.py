"""SWIM convergence benchmarks on the deterministic simulator (``grid._native.Simulation``).

- :mod:`grid.simbench.scenarios`: join, failure, accuracy and partition runs.
- :mod:`grid.simbench.speed`: how fast the simulator runs, and in how much memory.
- :mod:`grid.simbench.runner`: a plan of scenarios, sizes and runs under the Grid and the
  memberlist-LAN profiles, reduced to one report with Grid's targets checked.
- :mod:`grid.simbench.report` and :mod:`grid.simbench.plot`: text tables and an SVG of
  the CDFs.

``grid bench convergence`` is the command line; docs/convergence.md explains the method
and the figures.
"""
