"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1): serving (`validation.py`: defaults and
validation of policies and bindings), matching (`matching.py`, over the webhook predicates), the CEL
environment with the authorizer library (`celenv.py`, over `lite.cel`), decisions and messages (`decide.py`,
pure), the plain path's rewriting (`plain.py`, pure), status type checking (`typecheck.py`, pure; written by
`status.py`) and the admission plugin (`plugin.py`)."""
