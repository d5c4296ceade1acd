"""Certificates and keys for the local control plane, made with `cryptography`.

One CA signs the apiserver's serving certificate and the client certificates of
the admin, controller-manager and scheduler; a separate key pair signs service
account tokens. Existing files are kept (idempotent), so kubeconfigs handed out
earlier stay valid across restarts; delete the pki folder to rotate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# ECDSA P-256 keys: accepted by every component and much faster to generate
# than RSA on a 2-core machine.
_CURVE = ec.SECP256R1()
_VALIDITY = dt.timedelta(days=3650)


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate's file stem and subject (CN = user, O = groups)."""

    stem: str
    user: str
    groups: tuple[str, ...] = ()


ADMIN = ClientIdentity("admin", "tranche-admin", ("system:masters",))
CONTROLLER_MANAGER = ClientIdentity("controller-manager", "system:kube-controller-manager")
SCHEDULER = ClientIdentity("scheduler", "system:kube-scheduler")
# kube-apiserver's identity towards kubelets (`kubectl logs`, exec): what kubeadm names it.
KUBELET_CLIENT = ClientIdentity(
    "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",)
)
CLIENTS = (ADMIN, CONTROLLER_MANAGER, SCHEDULER, KUBELET_CLIENT)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _ensure_ca(pki: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = pki / "ca.crt", pki / "ca.key"
    if cert_path.is_file() and key_path.is_file():
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), _load_key(key_path)
    key = ec.generate_private_key(_CURVE)
    now = dt.datetime.now(dt.UTC)
    name = _name("tranche-devcluster-ca")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _issue(
    pki: Path,
    stem: str,
    *,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    sans: list[x509.GeneralName] | None = None,
) -> None:
    cert_path, key_path = pki / f"{stem}.crt", pki / f"{stem}.key"
    if cert_path.is_file() and key_path.is_file():
        return
    ca_cert, ca_key = ca
    key = ec.generate_private_key(_CURVE)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def ensure_node_cert(pki: Path, node: str, ip: str) -> tuple[Path, Path]:
    """A real node's kubelet certificate (`node-<name>.crt/.key`): client (system:node:<name>
    in system:nodes, what the Node authorizer expects) and server (127.0.0.1, verified by
    kube-apiserver for `kubectl logs`). Idempotent."""
    ca = _ensure_ca(pki)
    stem = f"node-{node}"
    cert_path, key_path = pki / f"{stem}.crt", pki / f"{stem}.key"
    if cert_path.is_file() and key_path.is_file():
        current = x509.load_pem_x509_certificate(cert_path.read_bytes())
        names = current.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if ipaddress.ip_address(ip) in names.get_values_for_type(x509.IPAddress):
            return cert_path, key_path
    ca_cert, ca_key = ca
    key = ec.generate_private_key(_CURVE)
    now = dt.datetime.now(dt.UTC)
    sans = [x509.DNSName(node), x509.DNSName("localhost")]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted({"127.0.0.1", ip})]
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"system:node:{node}", ("system:nodes",)))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def ensure_pki(pki: Path, service_ip: str) -> Path:
    """Create (once) the CA, serving and client certificates and the SA key pair."""
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    ca = _ensure_ca(pki)
    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", service_ip)]
    _issue(
        pki,
        "apiserver",
        subject=_name("kube-apiserver"),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        ca=ca,
        sans=sans,
    )
    for client in CLIENTS:
        subject = _name(client.user, client.groups)
        _issue(pki, client.stem, subject=subject, usage=ExtendedKeyUsageOID.CLIENT_AUTH, ca=ca)
    sa_key, sa_pub = pki / "sa.key", pki / "sa.pub"
    if not (sa_key.is_file() and sa_pub.is_file()):
        key = ec.generate_private_key(_CURVE)
        _write_key(sa_key, key)
        sa_pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return pki
