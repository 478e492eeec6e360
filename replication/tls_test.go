package replication

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeCA creates a CA and one node certificate signed by it, as PEM files.
func writeCA(t *testing.T, dir, name string) (certFile, keyFile, caFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name + " node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(file, typ string, b []byte) string {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", keyDER), write(name+"-ca.crt", "CERTIFICATE", caDER)
}

func TestMutualTLSCluster(t *testing.T) {
	dir := t.TempDir()
	cert, key, ca := writeCA(t, dir, "cluster")
	srvTLS, cliTLS, err := PeerTLS(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	c := NewTestCluster(t, 3, func(cfg *Config) { cfg.RaftServerTLS, cfg.RaftClientTLS = srvTLS, cliTLS })
	leader := c.Leader()
	f := c.Follower()
	res := enqueue(t, leader.Node, msg("tls", "x", 100*time.Millisecond))
	WaitFor(t, 10*time.Second, "the follower to apply the enqueue over TLS", func() bool {
		_, err := f.Node.Store().Get(res[0].ID)
		return err == nil
	})
	got := reserve(t, leader.Node, "tls", 1, 10*time.Second)
	if len(got) != 1 || got[0].Message.ID != res[0].ID {
		t.Fatalf("reserve over a TLS cluster: %+v", got)
	}

	// A peer whose certificate chains to another CA is refused.
	ocert, okey, oca := writeCA(t, dir, "other")
	_, otherCli, err := PeerTLS(ocert, okey, oca)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", leader.Cfg.RaftAddr, otherCli)
	if err == nil {
		// TLS 1.3 reports the server's rejection of the client certificate on first read.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Fatal("a peer with a foreign certificate was accepted")
	}
	if _, _, err := PeerTLS("", "", ""); err == nil {
		t.Fatal("PeerTLS without files must fail")
	}
}
