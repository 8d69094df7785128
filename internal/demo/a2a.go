package demo

import (
	"context"
	"fmt"
	"iter"
	"math"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// The demo's remote A2A agent (issue 10): a currency converter served with
// github.com/a2aproject/a2a-go/v2 on its own loopback port, knowing nothing
// of agentplane — it is registered through the normal API with protocol
// "a2a" (its card URL), linked to the planner, and reached through
// agentplane's A2A client like any remote A2A agent. Asked without an
// amount and two currencies it asks back (the task goes input-required);
// the answer, sent on the same task, completes it.

// CurrencyID is the remote A2A agent's id.
const CurrencyID = "currency"

// CurrencyDescription is what the planner's model is told of it.
const CurrencyDescription = "Converts an amount between currencies, e.g. 100 EUR to USD (made-up rates). A remote agent spoken to over A2A."

// CurrencyQuestion is what the converter asks when it cannot tell what to
// convert.
const CurrencyQuestion = "Which amount and currencies? For example: 100 EUR to USD"

// usdPer is a made-up rate table: US dollars per unit.
var usdPer = map[string]float64{"USD": 1, "EUR": 1.08, "GBP": 1.27, "CHF": 1.12, "JPY": 0.0067, "CNY": 0.14}

var conversionRe = regexp.MustCompile(`(?i)(\d+(?:[.,]\d+)?)\s*([a-z]{3})\s+(?:to|in|into)\s+([a-z]{3})\b`)

// convert reads "100 EUR to USD" anywhere in text.
func convert(text string) (string, bool) {
	m := conversionRe.FindStringSubmatch(text)
	if m == nil {
		return "", false
	}
	amount, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", "."), 64)
	from, to := strings.ToUpper(m[2]), strings.ToUpper(m[3])
	rf, okf := usdPer[from]
	rt, okt := usdPer[to]
	if err != nil || !okf || !okt {
		return "", false
	}
	out := math.Round(amount*rf/rt*100) / 100
	return fmt.Sprintf("%s %s is %.2f %s (made-up rate)", m[1], from, out, to), true
}

// currencyExecutor is the converter's A2A executor.
type currencyExecutor struct{}

func (currencyExecutor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		var text strings.Builder
		for _, p := range ec.Message.Parts {
			text.WriteString(p.Text())
			text.WriteString(" ")
		}
		if ec.StoredTask == nil {
			if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
				return
			}
		}
		answer, ok := convert(text.String())
		if !ok {
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart(CurrencyQuestion))), nil)
			return
		}
		if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewTextPart("looking up the rate…"))), nil) {
			return
		}
		// The answer in two chunks of one artifact, as a streaming agent would.
		head, tail, _ := strings.Cut(answer, " is ")
		first := a2a.NewArtifactEvent(ec, a2a.NewTextPart(head+" is "))
		first.Artifact.Name = "conversion"
		if !yield(first, nil) {
			return
		}
		if !yield(a2a.NewArtifactUpdateEvent(ec, first.Artifact.ID, a2a.NewTextPart(tail)), nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (currencyExecutor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// Currency is the running converter.
type Currency struct {
	// URL is its base URL; its card is URL + "/.well-known/agent-card.json".
	URL string
	srv *http.Server
}

// ServeCurrency starts the converter on a loopback port.
func ServeCurrency() (*Currency, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo currency agent: %w", err)
	}
	c := &Currency{URL: "http://" + ln.Addr().String() + "/a2a"}
	card := &a2a.AgentCard{
		Name: "Currency converter", Description: CurrencyDescription, Version: "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(c.URL, a2a.TransportProtocolJSONRPC)},
		Capabilities:        a2a.AgentCapabilities{Streaming: true},
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{ID: "convert", Name: "convert", Description: "Converts an amount between currencies", Tags: []string{"currency"},
			Examples: []string{"100 EUR to USD"}}},
	}
	h := a2asrv.NewHandler(currencyExecutor{})
	mux := http.NewServeMux()
	mux.Handle("GET /a2a/.well-known/agent-card.json", a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("POST /a2a", a2asrv.NewJSONRPCHandler(h))
	c.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go c.srv.Serve(ln)
	return c, nil
}

// Stop closes the converter.
func (c *Currency) Stop(ctx context.Context) error { return c.srv.Shutdown(ctx) }
