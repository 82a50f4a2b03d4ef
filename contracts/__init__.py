"""What a contract says, found by code: amounts (amounts.py), dates and terms (dates.py), party names (names.py), the
choice between candidates and yes/no facts (normalize.py), the candidates a job field offers the model
(candidates.py), and the job field schema with its x-* keywords (field_schema.py). Plain text code on the
engine's schema checks; the jobs worker plans each item with it (jobs/extraction.py)."""
