"""``python -m xprof_magic graph-renderer [FOLDER]``: the one command line xprof_magic has.

It puts the graph viewer's renderer (graphviz compiled to WebAssembly, and svg-pan-zoom) on
this machine, from the npm registry, so that the graph viewer draws without internet access;
``make install`` runs it. FOLDER defaults to where the viewer looks
(``XPROF_MAGIC_GRAPH_ASSETS``, else ``<sys.prefix>/share/xprof_magic/graph-viewer``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Run the command; 0 when done, 1 with a one-line reason when not."""
    from xprof_magic._viewer.app.graph import assets_dir, install

    parser = argparse.ArgumentParser(prog="python -m xprof_magic")
    commands = parser.add_subparsers(dest="command", required=True)
    renderer = commands.add_parser(
        "graph-renderer", help="put the graph viewer's renderer on this machine (npm pack)"
    )
    renderer.add_argument("folder", nargs="?", type=Path, help="default: where the viewer looks")
    args = parser.parse_args(argv)
    folder: Path = args.folder or assets_dir()
    problem = install(folder)
    if problem is not None:
        print(f"xprof_magic: the graph viewer's renderer was not installed: {problem}")
        return 1
    print(f"xprof_magic: the graph viewer's renderer is in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
