"""``python -m allot`` runs the command line."""

from allot.cli import main

raise SystemExit(main())
