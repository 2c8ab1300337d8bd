"""Encryption at rest of Secrets (issue 9 item 8): `aesgcm.py` (the store codec, upstream's
`k8s:enc:aesgcm:v1:` format), `keyfile.py` (the EncryptionConfiguration file, mode 0600), `control.py`
(wiring at start and the `lite secrets-encrypt` commands served to system:masters)."""
