"""The main job's builder: runs the proofs (``proofs.results``) and writes what they and
the simulator show, the report (report.md, report.json, counterexample files, pictures)
and the reviewers' spec (``publish.spec``, templates in ``publish/templates/``, the
simulator's facts in ``publish.facts``), built in a temporary directory and moved into
place only when complete (``publish.staging``); and the mutant catalogue's runner
(``publish.mutation``), whose cross-check runs the simulator. ``proofs/`` imports nothing
from here, nor from ``sim`` or vLLM.

    python -m publish --report report/
"""
