package grpcserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/grpcserver"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// selfSigned returns a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "delaywheel"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestTLS serves over the HTTP API's TLS configuration: a client that
// trusts the certificate is answered, a plaintext one is not.
func TestTLS(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	cert, pool := selfSigned(t)
	cfg := grpcserver.Config{HTTP: transport.Config{Clock: kn.Clock.Now}, TLS: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}}
	addr, _ := transporttest.ServeGRPC(t, cfg, kn.Node)
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"TLS", credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}), true},
		{"plaintext", insecure.NewCredentials(), false},
	} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(tc.creds))
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, err = pb.NewDelaywheelClient(conn).Topics(cctx, &pb.TopicsRequest{})
		ccancel()
		conn.Close()
		if (err == nil) != tc.ok {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	// The Go client: with WithGRPCTLS it trusts the certificate; without
	// it, a grpcs:// address checks the system's roots, which do not.
	for _, tc := range []struct {
		name string
		opts []client.GRPCOption
		ok   bool
	}{
		{"client WithGRPCTLS", []client.GRPCOption{client.WithGRPCTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool})}, true},
		{"client with the system's roots", nil, false},
	} {
		c, err := client.NewGRPC("grpcs://"+addr, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, err = c.Topics(cctx)
		ccancel()
		c.Close()
		if (err == nil) != tc.ok {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
}
