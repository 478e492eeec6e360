package tz

import (
	"archive/zip"
	"bytes"
	_ "embed" // the zone database, below
	"errors"
	"fmt"
	"io"
	"time"
)

//go:embed zoneinfo.zip
var zoneinfo []byte

// ErrUnknownZone means the database holds no zone of that name.
var ErrUnknownZone = errors.New("unknown time zone")

// Load returns the zone named name (an IANA name such as "Europe/Berlin")
// from the embedded database; "" and "UTC" are UTC. "Local" is refused:
// it means the host's zone, which differs between nodes. Each call reads
// the database's directory: callers that look zones up often cache them.
func Load(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	}
	r, err := zip.NewReader(bytes.NewReader(zoneinfo), int64(len(zoneinfo)))
	if err != nil {
		return nil, fmt.Errorf("embedded zone database: %w", err)
	}
	for _, f := range r.File {
		if f.Name != name {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("zone %q: %w", name, err)
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		if err != nil {
			return nil, fmt.Errorf("zone %q: %w", name, err)
		}
		loc, err := time.LoadLocationFromTZData(name, data)
		if err != nil {
			return nil, fmt.Errorf("zone %q: %w", name, err)
		}
		return loc, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownZone, name)
}
