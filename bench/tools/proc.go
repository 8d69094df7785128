package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
)

// The shared process plumbing, under the names the modes use.
type proc = benchproc.Proc

const (
	adminKey = benchproc.AdminKey
	userID   = benchproc.UserID
	userKey  = benchproc.UserKey
	agentID  = "bench-tools-agent"
)

var (
	postgresURL    = benchproc.PostgresURL
	buildPlatform  = benchproc.BuildPlatform
	startPlatform  = benchproc.StartPlatform
	selfProc       = benchproc.SelfProc
	postgresSchema = benchproc.PostgresSchema
	procStatusKB   = benchproc.ProcStatusKB
	procCPU        = benchproc.ProcCPU
	raiseNoFile    = benchproc.RaiseNoFile
	machineBusy    = benchproc.MachineBusy
	loadAvg        = benchproc.LoadAvg
	scrapeMetrics  = benchproc.ScrapeMetrics
)

// procThreads is the Threads: field of /proc/PID/status.
func procThreads(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return n
		}
	}
	return 0
}

// cpuMeter measures the CPU used by the platform, this tool and everything
// else on the machine over an interval.
type cpuMeter struct {
	pid            int
	began          time.Time
	srv, self, all time.Duration
	load0          string
}

func startCPU(pid int) *cpuMeter {
	return &cpuMeter{pid: pid, began: time.Now(), srv: procCPU(pid), self: procCPU(os.Getpid()), all: machineBusy(), load0: loadAvg()}
}

// cpuUse is cores used over an interval.
type cpuUse struct {
	server, tool, others float64
	load                 string
	wall                 time.Duration
}

func (m *cpuMeter) stop() cpuUse {
	wall := time.Since(m.began)
	srv, self, all := procCPU(m.pid)-m.srv, procCPU(os.Getpid())-m.self, machineBusy()-m.all
	s := wall.Seconds()
	return cpuUse{server: srv.Seconds() / s, tool: self.Seconds() / s, others: (all - srv - self).Seconds() / s, load: m.load0 + "→" + loadAvg(), wall: wall}
}

func (c cpuUse) String() string {
	return fmt.Sprintf("CPU cores: server %.2f, bench %.2f, others %.2f (PostgreSQL included), load %s", c.server, c.tool, c.others, c.load)
}
