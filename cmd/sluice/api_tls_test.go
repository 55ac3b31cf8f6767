package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// sluice api with SLUICE_API_TLS_CERT_FILE serves /v1 over TLS only, with
// the configured certificate.
func TestAPICommandTLS(t *testing.T) {
	dir := t.TempDir()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	url, _ := testenv.NewMigratedDatabase(t)
	port := testenv.FreePort(t)
	for k, v := range map[string]string{
		"DATABASE_URL": url, "EVENT_STORE_BACKEND": "file", "EVENT_STORE_FILE_DIR": t.TempDir(),
		"SLUICE_API_ADDR": "127.0.0.1:" + strconv.Itoa(port), "SLUICE_HTTP_ADDR": "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		"SLUICE_API_TOKENS": "tok-1", "SLUICE_LOG_LEVEL": "error",
		"SLUICE_API_TLS_CERT_FILE": certFile, "SLUICE_API_TLS_KEY_FILE": keyFile,
	} {
		t.Setenv(k, v)
	}
	cmd := newAPICmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("api did not stop")
		}
	}()
	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(der)
	pool.AddCert(leaf)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	var resp *http.Response
	for range 200 {
		req, _ := http.NewRequest("POST", base+"/v1/dbs/shop/classes/order/instances", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer tok-1")
		if resp, err = client.Do(req); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("api over TLS: %v\n%s", err, errb.String())
	}
	resp.Body.Close()
	if resp.StatusCode != 202 || resp.TLS == nil {
		t.Fatalf("create over TLS: %d", resp.StatusCode)
	}
	if r, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/openapi.json"); err == nil && r.StatusCode == 200 {
		t.Fatal("plain HTTP is served beside TLS")
	}
	if !strings.Contains(out.String(), "sluice api listening on https://127.0.0.1:") {
		t.Fatalf("stdout: %q", out.String())
	}
}
