"""Helpers for minting and presenting test tokens."""

from __future__ import annotations

import base64
import json

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

SECRET = "0123456789abcdef0123456789abcdef"  # 32 bytes: the HS256 minimum


def public_pem(private_key) -> bytes:
    return private_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def public_jwk(private_key, **extra) -> dict:
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(private_key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    return {**algorithm.to_jwk(private_key.public_key(), as_dict=True), **extra}


def b64url(data: bytes | dict) -> str:
    if isinstance(data, dict):
        data = json.dumps(data).encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}
