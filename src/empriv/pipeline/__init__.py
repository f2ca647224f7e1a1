"""The stage layer: one module per ``dvc.yaml`` stage, run by its thin script ``stages/<stage>.py`` (which calls the
module's ``cli(argv)``: parse the command line, run the stage's ``main``).

These modules are the only code that knows where files live (from :mod:`empriv.paths`) and that reads
``params.yaml``; they load inputs, call the library (which takes and returns objects) and write outputs
atomically. Imports point one way: pipeline → library, never back.
"""
