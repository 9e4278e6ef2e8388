"""What every stage of the toolkit shares, and imports nothing of the others.

- :mod:`.project`: where the project's matrix files are (``constraints/``), found from the current directory;
- :mod:`.lane_table`: what ``constraints/lanes.toml`` says (the lanes, their patch releases, the matrix
  settings) and the per-lane pip constraints files derived from it (``python -m
  nsa_triton_sel.compat.core.lane_table --newest`` prints the main job's lane);
- :mod:`.machine`: this machine as the lanes see it (usable cores, GPUs, the archs a compile covers);
- :mod:`.verdicts`: the verdict vocabulary (compile, record and upgrade verdicts);
- :mod:`.atomic`: crash-safe writes, the file lock, bounded reads of the files a command is handed;
- :mod:`.env`: the environment fingerprint and the interpreter probe;
- :mod:`.command`: what every ``nsa-sel`` command shares (one-line errors, the parser, ``--debug``);
- :mod:`.notes_file`: the note files' common reading (the GPU canaries' notes, the speed notes).

Of the library it imports only ``provenance``, ``files`` and ``_toml`` (standard library only, like
this package).  May import: nothing.
"""
