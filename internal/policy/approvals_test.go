package policy

import (
	"strings"
	"testing"
)

func TestApprovalQuotas(t *testing.T) {
	p, err := Parse(strings.NewReader("approvals:\n  max_pending_per_principal: 7\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Approvals.MaxPendingPerPrincipal != 7 || p.Approvals.MaxPendingTotal != DefaultMaxPendingTotal {
		t.Fatalf("quotas: %+v", p.Approvals.Quotas)
	}
	if d := Default().Approvals.Quotas; d.MaxPendingPerPrincipal != DefaultMaxPendingPerPrincipal || d.MaxPendingTotal != DefaultMaxPendingTotal {
		t.Fatalf("default quotas: %+v", d)
	}
	wantInvalid(t,
		"approvals:\n  max_pending_total: -1\n",
		"approvals:\n  max_pending_per_principal: 1000000\n",
		"approvals:\n  max_pending_totl: 5\n",
	)
}
