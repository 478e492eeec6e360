package replication

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// PeerTLS builds the mutual-TLS configs for Raft traffic from PEM files: the
// node's certificate and key, and the CA that signed every node's
// certificate. Peers dial addresses, not names, so a peer is authenticated
// by its certificate chaining to the cluster CA (no host name check), in
// both directions.
func PeerTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, nil, errors.New("raft TLS needs a certificate, a key and a CA file")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("raft TLS key pair: %w", err)
	}
	pool, err := LoadCAPool(caFile)
	if err != nil {
		return nil, nil, err
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("peer sent no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, b := range raw {
			c, err := x509.ParseCertificate(b)
			if err != nil {
				return fmt.Errorf("peer certificate: %w", err)
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
	server = &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAnyClientCert, VerifyPeerCertificate: verify,
	}
	client = &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		InsecureSkipVerify:    true, // replaced by VerifyPeerCertificate: chain to the cluster CA
		VerifyPeerCertificate: verify,
	}
	return server, client, nil
}

// LoadCAPool reads a PEM bundle of CA certificates.
func LoadCAPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
	}
	return pool, nil
}
