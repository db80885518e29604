"""One capture's lifecycle: the plan, the trace, the run it records, its result.

May import the cell, the runs and the backends; never the analysis, the viewer or a front. Its
modules, and what each holds, are in ARCHITECTURE.md's table.
"""
