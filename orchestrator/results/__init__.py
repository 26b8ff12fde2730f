"""The morning after, read-only over a study: status, export, importance, compare, report."""
