"""The build report: a typed record of one `kiln build` or `kiln test` invocation
(record.py), written to the output base at the end of each, and its rendering as one
self-contained HTML file (html.py): `--report=FILE.html`, `kiln report [FILE.html]`.

Nothing here imports the rest of kiln: the CLI gathers the record (kiln.cli.build_report).
"""
