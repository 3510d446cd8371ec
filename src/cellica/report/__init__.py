"""Stage 5, reports: the HTML index and one page per gene, from the evaluation's files."""
