"""The ground floor: errors, records and failure kinds, the outcome rules (the one gate, the one
early-stop rule), correctness comparison, verdicts, NCCL facts, files, launch types and the study
folder's layout. Imports nothing else of ours."""
