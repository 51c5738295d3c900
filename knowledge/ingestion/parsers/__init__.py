"""One module per file format behind `knowledge.ingestion.parsing.parse_document`.

Import from `knowledge.ingestion.parsing`; these modules are its implementation. One exception:
`archive` also reads an uploaded .zip archive's members, for the upload service.
"""
