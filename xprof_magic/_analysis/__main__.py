"""``python -m xprof_magic._analysis RUN_DIR``: the full summary, in a process of its own."""

from xprof_magic._analysis import main

raise SystemExit(main())
