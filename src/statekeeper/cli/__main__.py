"""``python -m statekeeper.cli`` runs the ``statekeeper`` command line."""

from .app import main

if __name__ == "__main__":
    main()
