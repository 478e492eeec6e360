package api

import (
	"fmt"
	"os"
	"strings"
)

// ReadTokenFile reads the bearer token a server checks and a client sends
// (API.md: Authentication) from the file at path, trimmed of
// surrounding space; no path means no token (""). A file that holds only
// space is refused rather than read as "no token". option names the
// command-line option the path came from, in the errors.
func ReadTokenFile(option, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", option, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s %s is empty", option, path)
	}
	return tok, nil
}
