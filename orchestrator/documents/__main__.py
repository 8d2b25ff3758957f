"""`python -m orchestrator.documents`: a PDF on stdin, its page count and text size on
stdout (`pdf.main`)."""

from orchestrator.documents.pdf import main

main()
