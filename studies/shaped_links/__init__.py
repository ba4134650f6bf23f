"""The communication model checked over real TCP links between network namespaces (needs root).

Run it with `python -m studies.shaped_links`; see README.md in this folder."""
