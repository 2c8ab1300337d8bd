"""The ServiceAccount key's RSA operations (RS256: RSASSA-PKCS1-v1_5 with SHA-256) through the OpenSSL the
`ssl` module already loaded, so a running server never maps `cryptography` (about 10 MB resident).

Role: `load_rsa_key(pem)` returns an `RsaKey` that signs, verifies and exports its public half (DER
SubjectPublicKeyInfo). It binds OpenSSL's EVP functions with ctypes from the `_ssl` extension's own libcrypto
(the library every TLS connection of the process already uses); where they cannot be bound (an `ssl` built
without a shared libcrypto), it falls back to `cryptography`, with the same results.

Invariants:
- An `RsaKey` is immutable after loading and safe to use from several threads (one digest context per call;
  OpenSSL keys are read-only once loaded); its native key is freed when the object is collected.
- `verify` answers False for any signature OpenSSL does not accept (wrong length, wrong key, garbage) and leaves
  no error on the thread's OpenSSL error queue, which the `ssl` module shares.
- Only RSA keys load (ValueError otherwise), as the ServiceAccount signer requires.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, Protocol

EVP_PKEY_RSA = 6  # OpenSSL's NID_rsaEncryption


class RsaKey(Protocol):
    def sign(self, data: bytes) -> bytes: ...

    def verify(self, data: bytes, signature: bytes) -> bool: ...

    def spki_der(self) -> bytes: ...


def load_rsa_key(pem: bytes) -> RsaKey:
    """The RSA private key in `pem` (PKCS#8 or PKCS#1); ValueError if it is not one."""
    lib = _libcrypto()
    if lib is None:
        return _CryptographyKey(pem)
    return _OpenSslKey(lib, pem)


def _libcrypto() -> Any:
    """The libcrypto `_ssl` is linked to, with the prototypes used here; None if it does not export them."""
    try:
        import _ssl

        lib: Any = ctypes.CDLL(_ssl.__file__)
        p, c_int, size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        protos: list[tuple[str, Any, list[Any]]] = [
            ("BIO_new_mem_buf", p, [ctypes.c_char_p, c_int]),
            ("BIO_free", c_int, [p]),
            ("PEM_read_bio_PrivateKey", p, [p, p, p, p]),
            ("EVP_PKEY_free", None, [p]),
            ("EVP_MD_CTX_new", p, []),
            ("EVP_MD_CTX_free", None, [p]),
            ("EVP_sha256", p, []),
            ("EVP_DigestSignInit", c_int, [p, p, p, p, p]),
            ("EVP_DigestSign", c_int, [p, p, ctypes.POINTER(size_t), ctypes.c_char_p, size_t]),
            ("EVP_DigestVerifyInit", c_int, [p, p, p, p, p]),
            ("EVP_DigestVerify", c_int, [p, ctypes.c_char_p, size_t, ctypes.c_char_p, size_t]),
            ("i2d_PUBKEY", c_int, [p, ctypes.POINTER(p)]),
            ("ERR_clear_error", None, []),
        ]
        for name, restype, argtypes in protos:
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        # OpenSSL 3 names it EVP_PKEY_get_base_id; 1.1.1 EVP_PKEY_base_id
        base_id = getattr(lib, "EVP_PKEY_get_base_id", None) or lib.EVP_PKEY_base_id
        base_id.restype, base_id.argtypes = c_int, [p]
        lib.lite_pkey_base_id = base_id
        return lib
    except (ImportError, OSError, AttributeError):
        return None


class _OpenSslKey:
    """An RSA key held by OpenSSL (see the module docstring)."""

    def __init__(self, lib: Any, pem: bytes) -> None:
        self._lib = lib
        bio = lib.BIO_new_mem_buf(pem, len(pem))
        if not bio:
            raise MemoryError("BIO_new_mem_buf")
        try:
            pkey = lib.PEM_read_bio_PrivateKey(bio, None, None, None)
        finally:
            lib.BIO_free(bio)
        if not pkey:
            lib.ERR_clear_error()
            raise ValueError("not a PEM private key")
        self._pkey = pkey
        weakref.finalize(self, lib.EVP_PKEY_free, pkey)
        if lib.lite_pkey_base_id(pkey) != EVP_PKEY_RSA:
            raise ValueError("the service account signing key must be an RSA key")

    def sign(self, data: bytes) -> bytes:
        lib = self._lib
        ctx = lib.EVP_MD_CTX_new()
        if not ctx:
            raise MemoryError("EVP_MD_CTX_new")
        try:
            size = ctypes.c_size_t(0)
            if (lib.EVP_DigestSignInit(ctx, None, lib.EVP_sha256(), None, self._pkey) != 1
                    or lib.EVP_DigestSign(ctx, None, ctypes.byref(size), data, len(data)) != 1):
                lib.ERR_clear_error()
                raise RuntimeError("OpenSSL could not sign with the RSA key")
            out = ctypes.create_string_buffer(size.value)
            if lib.EVP_DigestSign(ctx, out, ctypes.byref(size), data, len(data)) != 1:
                lib.ERR_clear_error()
                raise RuntimeError("OpenSSL could not sign with the RSA key")
            return out.raw[:size.value]
        finally:
            lib.EVP_MD_CTX_free(ctx)

    def verify(self, data: bytes, signature: bytes) -> bool:
        lib = self._lib
        ctx = lib.EVP_MD_CTX_new()
        if not ctx:
            raise MemoryError("EVP_MD_CTX_new")
        try:
            ok: bool = (lib.EVP_DigestVerifyInit(ctx, None, lib.EVP_sha256(), None, self._pkey) == 1
                  and lib.EVP_DigestVerify(ctx, signature, len(signature), data, len(data)) == 1)
            if not ok:
                lib.ERR_clear_error()
            return ok
        finally:
            lib.EVP_MD_CTX_free(ctx)

    def spki_der(self) -> bytes:
        lib = self._lib
        size = lib.i2d_PUBKEY(self._pkey, None)
        if size <= 0:
            lib.ERR_clear_error()
            raise RuntimeError("OpenSSL could not encode the public key")
        out = ctypes.create_string_buffer(size)
        cursor = ctypes.c_void_p(ctypes.addressof(out))  # i2d_PUBKEY advances it past what it wrote
        if lib.i2d_PUBKEY(self._pkey, ctypes.byref(cursor)) != size:
            lib.ERR_clear_error()
            raise RuntimeError("OpenSSL could not encode the public key")
        return out.raw


class _CryptographyKey:
    """The same operations through `cryptography`, where OpenSSL's EVP functions cannot be bound."""

    def __init__(self, pem: bytes) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("the service account signing key must be an RSA key")
        self._key = key

    def sign(self, data: bytes) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        return self._key.sign(data, padding.PKCS1v15(), hashes.SHA256())

    def verify(self, data: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        try:
            self._key.public_key().verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return False
        return True

    def spki_der(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self._key.public_key().public_bytes(serialization.Encoding.DER,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
