package tsecstorage

import (
	"context"
	"fmt"
	"time"
)

// Obtained is the broker's answer to "may this process obtain a
// certificate for Name now?" (the cert.obtain decision).
type Obtained struct {
	Allow    bool     `json:"allow"`
	Status   string   `json:"status"`   // allowed, denied, default, floor, invalid
	Reason   string   `json:"reason"`   // why, as the decision log has it
	Name     string   `json:"name"`     // the name as the broker read it
	Resource string   `json:"resource"` // what the policy was asked about: names/NAME
	Suffix   string   `json:"suffix"`   // the registrable domain the rate counts under
	Rules    []string `json:"rules"`    // the deciding rules
	// The rate, when one counted this answer.
	New      bool   `json:"new"`       // the name had not been allowed before
	Used     int    `json:"used"`      // new names in the window, this one included
	MaxNew   int    `json:"max_new"`   // the rate's bound
	WindowS  int    `json:"window_s"`  // the rate's window, seconds
	RateRule string `json:"rate_rule"` // the rule whose rate decided
}

// Obtain asks the broker whether this process may obtain a certificate
// for name now: the policy's cert.obtain for the principal the broker
// knows this process as, and the rule's rate ("at most N new names per
// registrable domain in W seconds"), counted with every other broker on
// the shared storage.  With dry, nothing is counted (a question, not an
// order).  An error is a call that was not answered; a refusal is an
// answer (Allow false, with the Reason).
func (s *Storage) Obtain(ctx context.Context, name string, dry bool) (*Obtained, error) {
	var o Obtained
	err := s.call(ctx, "Obtain", name, 0, "cert.obtain",
		map[string]interface{}{"name": name, "dry": dry}, &o)
	if err != nil {
		return nil, err
	}
	return &o, nil
}

// DecisionFunc is certmagic's OnDemandConfig.DecisionFunc over the
// broker: nil when the broker allows obtaining a certificate for name
// (and counts it against the rule's rate), else an error saying why; an
// *Error for which errors.Is(err, ErrDenied) holds when the policy or its
// rate refused it.  A broker that does not answer within Options.Timeout
// refuses too.
//
//	cfg.OnDemand = &certmagic.OnDemandConfig{DecisionFunc: s.DecisionFunc}
func (s *Storage) DecisionFunc(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout+time.Second)
	defer cancel()
	o, err := s.Obtain(ctx, name, false)
	if err != nil {
		return fmt.Errorf("tsecstorage: on-demand %q: %w", name, err)
	}
	if !o.Allow {
		return &Error{Op: "Obtain", Key: name, Code: "denied", Message: o.Reason,
			Reason: o.Status, Rules: o.Rules}
	}
	return nil
}
