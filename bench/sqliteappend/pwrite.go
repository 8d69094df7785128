package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// pwrites measures what one write system call of a WAL frame costs on
// the disk under dir: n writes alternating a frame's 24-byte header and a
// 4 KiB page, as SQLite writes them, at offsets that start over at 4 MiB
// like a WAL restarting. No fsync: the calls' own cost, not the disk's.
func pwrites(dir string, n int) error {
	path := filepath.Join(dir, fmt.Sprintf("sqliteappend-pwrite-%d", os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer f.Close()
	header, page := make([]byte, 24), make([]byte, 4096)
	u0, s0 := cpu()
	start := time.Now()
	var off int64
	for i := 0; i < n; i++ {
		b := header
		if i%2 == 1 {
			b = page
		}
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		if off += int64(len(b)); off > 4<<20 {
			off = 0
		}
	}
	r := result{events: n, wall: time.Since(start)}
	u1, s1 := cpu()
	r.user, r.sys = u1-u0, s1-s0
	fmt.Printf("%d writes (24 B and 4 KiB alternating) under %s: wall %.2f, user %.2f, system %.2f µs per call\n", n, dir, r.per(r.wall), r.per(r.user), r.per(r.sys))
	return nil
}
