"""Reading the few fields lite needs out of DER: a certificate's validity and an RSA public key's numbers.

Role: what the server and the agent read from their own certificates and keys at start and at run time
(`expires_within`, the JWKS of the ServiceAccount key) without loading `cryptography`, whose native library
alone is about 8 MB resident: only generating keys and certificates needs it.

Invariants: pure functions over bytes; anything that is not the expected DER structure raises ValueError
(never an IndexError or a wrong value); only definite-length encodings are accepted (DER has no other).
"""

from __future__ import annotations

import base64
import calendar
import re

SEQUENCE, INTEGER, BIT_STRING, UTC_TIME, GENERALIZED_TIME = 0x30, 0x02, 0x03, 0x17, 0x18
CONTEXT_0 = 0xA0  # [0] EXPLICIT, the certificate's version

_PEM = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.S)


def pem_der(pem: bytes, label: str) -> bytes:
    """The DER of the first PEM block labelled `label` (e.g. "CERTIFICATE")."""
    for m in _PEM.finditer(pem):
        if m.group(1).decode() == label:
            try:
                return base64.b64decode(b"".join(m.group(2).split()), validate=True)
            except ValueError as e:
                raise ValueError(f"bad base64 in the PEM {label} block") from e
    raise ValueError(f"no PEM {label} block")


def read(data: bytes, pos: int = 0) -> tuple[int, bytes, int]:
    """(tag, contents, position after the element) of the DER element at `pos`."""
    if pos + 2 > len(data):
        raise ValueError("DER: truncated element")
    tag, first = data[pos], data[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or pos + count > len(data):
            raise ValueError("DER: bad length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    end = pos + length
    if end > len(data):
        raise ValueError("DER: element runs past its container")
    return tag, data[pos:end], end


def children(contents: bytes) -> list[tuple[int, bytes]]:
    """The (tag, contents) of each element inside a constructed element's contents."""
    out, pos = [], 0
    while pos < len(contents):
        tag, value, pos = read(contents, pos)
        out.append((tag, value))
    return out


def _expect(item: tuple[int, bytes], tag: int, what: str) -> bytes:
    if item[0] != tag:
        raise ValueError(f"DER: {what}: expected tag {tag:#x}, found {item[0]:#x}")
    return item[1]


def _time(item: tuple[int, bytes]) -> float:
    """Epoch seconds of a UTCTime (YYMMDDHHMMSSZ, years 1950-2049) or GeneralizedTime (YYYYMMDDHHMMSSZ)."""
    tag, value = item
    text = value.decode("ascii", "replace")
    if tag == UTC_TIME and re.fullmatch(r"\d{12}Z", text):
        year = int(text[:2])
        year += 1900 if year >= 50 else 2000
        rest = text[2:]
    elif tag == GENERALIZED_TIME and re.fullmatch(r"\d{14}Z", text):
        year, rest = int(text[:4]), text[4:]
    else:
        raise ValueError(f"DER: not a UTC time: {text!r}")
    month, day, hour, minute, second = (int(rest[i:i + 2]) for i in range(0, 10, 2))
    return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))


def certificate_validity(der: bytes) -> tuple[float, float]:
    """(notBefore, notAfter) in epoch seconds of an X.509 certificate."""
    tag, cert, _ = read(der)
    if tag != SEQUENCE:
        raise ValueError("DER: a certificate is a SEQUENCE")
    parts = children(cert)
    if not parts:
        raise ValueError("DER: empty certificate")
    tbs = children(_expect(parts[0], SEQUENCE, "tbsCertificate"))
    if tbs and tbs[0][0] == CONTEXT_0:
        tbs = tbs[1:]
    # serialNumber, signature, issuer, validity
    if len(tbs) < 4:
        raise ValueError("DER: tbsCertificate too short")
    validity = children(_expect(tbs[3], SEQUENCE, "validity"))
    if len(validity) != 2:
        raise ValueError("DER: validity holds two times")
    return _time(validity[0]), _time(validity[1])


def pem_certificate_validity(pem: bytes) -> tuple[float, float]:
    """`certificate_validity` of the first certificate in a PEM file's bytes."""
    return certificate_validity(pem_der(pem, "CERTIFICATE"))


def _unsigned(value: bytes) -> int:
    if not value or value[0] & 0x80:
        raise ValueError("DER: expected a positive INTEGER")
    return int.from_bytes(value, "big")


def rsa_public_numbers(spki: bytes) -> tuple[int, int]:
    """(modulus n, public exponent e) of a DER SubjectPublicKeyInfo holding an RSA key."""
    rsa_oid = bytes.fromhex("2a864886f70d010101")  # 1.2.840.113549.1.1.1 rsaEncryption
    tag, info, _ = read(spki)
    parts = children(_expect((tag, info), SEQUENCE, "SubjectPublicKeyInfo"))
    if len(parts) != 2:
        raise ValueError("DER: SubjectPublicKeyInfo holds an algorithm and a key")
    algorithm = children(_expect(parts[0], SEQUENCE, "algorithm"))
    if not algorithm or algorithm[0] != (0x06, rsa_oid):
        raise ValueError("not an RSA public key")
    bits = _expect(parts[1], BIT_STRING, "subjectPublicKey")
    if not bits or bits[0] != 0:
        raise ValueError("DER: the key's BIT STRING has unused bits")
    tag, key, _ = read(bits[1:])
    numbers = children(_expect((tag, key), SEQUENCE, "RSAPublicKey"))
    if len(numbers) != 2:
        raise ValueError("DER: RSAPublicKey holds n and e")
    return (_unsigned(_expect(numbers[0], INTEGER, "modulus")),
            _unsigned(_expect(numbers[1], INTEGER, "publicExponent")))
