package pipeline

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writeCert(t *testing.T, dir, cn string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{cn}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A renewed certificate is served after the recheck interval without a
// restart; a broken change keeps the previous certificate.
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "one.example")
	tc, err := TLSConfig(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r := &certReloader{certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"), now: func() time.Time { return now }}
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	r.log = slogDiscard()
	cn := func() string {
		c, err := r.get(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	if cn() != "one.example" || tc.MinVersion != tls.VersionTLS12 {
		t.Fatal("first certificate")
	}
	writeCert(t, dir, "two.example")
	if cn() != "one.example" {
		t.Fatal("reloaded before the recheck interval")
	}
	now = now.Add(tlsRecheck)
	if got := cn(); got != "two.example" {
		t.Fatalf("after the recheck: %s", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), []byte("half-written"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(tlsRecheck)
	if got := cn(); got != "two.example" {
		t.Fatalf("a broken key replaced the certificate: %s", got)
	}
	if _, err := TLSConfig(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), nil); err == nil {
		t.Fatal("a broken pair loaded at start")
	}
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
