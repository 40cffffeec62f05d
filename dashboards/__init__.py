"""The web dashboard: Plotly figures built in Python from the metrics answers
(`figures`), the data each panel needs (`data`), and the pages (`page`)."""
