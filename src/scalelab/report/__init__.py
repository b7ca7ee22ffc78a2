"""The report wing: a folder of result.json files -> frames -> tables, plots, exports, and two folders compared.

`frames` turns results into one row per run and one per configuration (speedup, efficiency); `explain` adds
what the network and the model predict and why a configuration scales as it does; `tables`, `plots` and
`export` draw those frames as text, PNGs and files; `compare` puts two folders side by side; `cli` is
`benchmark.py`. Column names are the result schema's names, so one quantity has one name from result.json
to the CSV. Nothing here imports torch: the report runs on a login node.
"""
