"""``python -m evaldag.engine.cli``: the command line as a module, for ``--launcher torchrun``.

torchrun starts each rank as ``python -m MODULE``; naming :mod:`.main` there made runpy
warn once per rank (``'evaldag.engine.cli.main' found in sys.modules``: the package's
``__init__`` had imported it already). This module is imported by nothing, so no warning.
"""

from .main import main

raise SystemExit(main())
