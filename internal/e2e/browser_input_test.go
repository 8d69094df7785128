package e2e

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserInputRequired (issue 10): the demo agent asked for the weather
// without a city asks "Which city?": the page shows the question as the
// agent's bubble, says the next message answers it, and offers "New topic";
// the answer, typed as an ordinary message, resumes the intention and the
// reply arrives. A reload rebuilds the question, answered. A new topic sent
// while a question is open leaves it unanswered (new_intention).
func TestBrowserInputRequired(t *testing.T) {
	browser := newBrowser(t)
	s := startDemo(t)
	p := openChat(t, browser, s.URL, "demo")

	p.do("click the weather suggestion", chromedp.Click(`#suggestions button[data-prompt="What's the weather?"]`))
	p.waitAssistantStatus("input_required")
	st := p.state()
	if last := st.Messages[len(st.Messages)-1]; last.Text != "Which city?" || !strings.Contains(last.Detail, "your next message answers") {
		t.Fatalf("the question bubble %+v\n%s", last, p.describe())
	}
	p.waitFor("the composer offers a new topic and says what it answers",
		`!document.getElementById('new-topic-button').hidden && document.getElementById('message-input').placeholder.indexOf('Answer: Which city?') === 0`)
	if c := p.controls(); c.InputDisabled || c.SendDisabled {
		t.Fatalf("the composer is closed while the agent waits for an answer: %+v", c)
	}

	p.sendByEnter("Paris")
	p.waitAssistantStatus("done")
	st = p.state()
	if n := len(st.Messages); n != 4 || !strings.Contains(st.Messages[3].Text, "Paris") || st.Messages[1].Detail != "answered" {
		t.Fatalf("after the answer: %+v\n%s", st.Messages, p.describe())
	}
	p.waitFor("the new-topic button is gone", `document.getElementById('new-topic-button').hidden`)

	p.do("reload", chromedp.Reload())
	p.waitConnected()
	p.waitFor("the conversation is rebuilt", `window.agentplaneChat.state().messages.length === 4`)
	st = p.state()
	if st.Messages[1].Status != "input_required" || st.Messages[1].Text != "Which city?" || st.Messages[1].Detail != "answered" || st.Messages[3].Status != "done" {
		t.Fatalf("after the reload: %+v", st.Messages)
	}

	// Asked again; this time a new topic.
	p.sendByEnter("What's the weather?")
	p.waitAssistantStatus("input_required")
	p.do("type a new topic", chromedp.SetValue(chromedp.ID("message-input"), "What time is it?"))
	p.do("click New topic", chromedp.Click(chromedp.ID("new-topic-button")))
	p.waitAssistantStatus("done")
	st = p.state()
	var asked []chatMessage
	for _, m := range st.Messages {
		if m.Status == "input_required" {
			asked = append(asked, m)
		}
	}
	if len(asked) != 2 || asked[1].Detail != "left unanswered — a new topic started" {
		t.Fatalf("questions %+v\n%s", asked, p.describe())
	}
}
