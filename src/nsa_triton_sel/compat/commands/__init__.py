"""The ``nsa-sel`` commands that stand on every other stage.

- :mod:`.cli`: the router (``nsa-sel COMMAND``, the ``nsa-sel`` console script) and the exit statuses;
  ``smoke`` and ``pin`` are routed to :mod:`..smoke` and :mod:`..ledger`, ``capture`` to :mod:`..registry`;
- :mod:`.doctor` and :mod:`.standing`: ``nsa-sel doctor``, the environment and where its pair stands;
- :mod:`.releases`: ``nsa-sel releases``, what the package index has that ``lanes.toml`` lacks;
- :mod:`.upgrade`: ``nsa-sel check-upgrade`` (and ``nox -s check-upgrade``), the verdict about a
  candidate release and ``--admit``;
- :mod:`.team_upgrade` and :mod:`.team_matrix`: the same question and the verdict table for a team's
  own spec module (``check-upgrade --specs``, ``nsa-sel matrix``).

No other package imports these.  May import: core, smoke, ledger, lanes.
"""
