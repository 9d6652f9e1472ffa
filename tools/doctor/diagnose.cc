// How `lockstep doctor` decides (docs/engine.md, "lockstep doctor"):
//   1. a rank without a dump died or was killed first;
//   2. per process set, each rank's pending (not yet negotiated) operations
//      are compared. A pending set contained in another's only lags behind;
//      of the rest, the one most ranks share is the reference (on a tie, the
//      one whose operations all ran before). A rank pending an operation
//      outside the reference diverged; a rank only lacking some is late, and
//      the late rank whose last activity is oldest stalled first;
//   3. otherwise a mismatch error, a rank behind the others in the
//      negotiated order, or the earliest failure.
#include "tools/doctor/diagnose.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace lockstep::doctor {
namespace {

using Labels = std::set<std::string>;

std::string label(const Operation& o) { return fmt::format("{} '{}'", o.op, o.name); }

std::string ranks_text(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ","));
}

std::string labels_text(const Labels& labels) { return fmt::format("{}", fmt::join(labels, ", ")); }

// The members of each set, from the ranks that recorded operations in it.
std::map<int, std::vector<const RankDump*>> members_by_set(const std::vector<RankDump>& dumps) {
  std::map<int, std::vector<const RankDump*>> out;
  for (const auto& d : dumps) {
    std::set<int> sets;
    for (const auto& o : d.operations) sets.insert(o.set);
    for (int s : sets) out[s].push_back(&d);
  }
  return out;
}

Labels pending_in(const RankDump& d, int set) {
  Labels out;
  for (const auto& o : d.operations)
    if (o.set == set && o.pending()) out.insert(label(o));
  return out;
}

bool ran_before(const std::vector<RankDump>& dumps, const std::string& l) {
  for (const auto& d : dumps)
    for (const auto& o : d.operations)
      if (o.finished() && label(o) == l) return true;
  return false;
}

// The reference pending set (Note at the top): a set that is a strict subset
// of another only lags behind it, so candidates are the maximal ones; of
// those the one most ranks share, else the one whose operations all ran
// before; nullopt when that still ties.
std::optional<Labels> reference(const std::map<Labels, std::vector<int>>& groups,
                                const std::vector<RankDump>& dumps) {
  std::vector<std::pair<const Labels*, size_t>> maximal;
  for (const auto& [labels, ranks] : groups) {
    bool lags = false;
    for (const auto& [other, unused] : groups)
      lags |= other.size() > labels.size() &&
              std::includes(other.begin(), other.end(), labels.begin(), labels.end());
    if (!lags) maximal.emplace_back(&labels, ranks.size());
  }
  size_t best = 0;
  for (const auto& m : maximal) best = std::max(best, m.second);
  std::vector<const Labels*> top;
  for (const auto& m : maximal)
    if (m.second == best) top.push_back(m.first);
  if (top.size() == 1) return *top[0];
  std::vector<const Labels*> known;
  for (const Labels* t : top)
    if (std::all_of(t->begin(), t->end(), [&](const auto& l) { return ran_before(dumps, l); }))
      known.push_back(t);
  if (known.size() == 1) return *known[0];
  return std::nullopt;
}

// How long `l` had been pending on the rank that submitted it first.
int64_t pending_age_us(const std::vector<const RankDump*>& members, int set, const std::string& l) {
  int64_t age = 0;
  for (const RankDump* d : members)
    for (const auto& o : d->operations)
      if (o.set == set && o.pending() && label(o) == l)
        age = std::max(age, d->dumped_us - o.submitted_us);
  return age;
}

// Each member's pending operations in `set`, grouped by what they have
// pending beyond what every member has (ranks with the same partial set).
std::map<Labels, std::vector<int>> partial_groups(const std::map<int, Labels>& pending) {
  Labels everywhere, anywhere;
  for (const auto& [rank, labels] : pending) anywhere.insert(labels.begin(), labels.end());
  for (const auto& l : anywhere)
    if (std::all_of(pending.begin(), pending.end(), [&](auto& p) { return p.second.count(l); }))
      everywhere.insert(l);
  std::map<Labels, std::vector<int>> groups;
  for (auto& [rank, labels] : pending) {
    Labels partial;
    std::set_difference(labels.begin(), labels.end(), everywhere.begin(), everywhere.end(),
                        std::inserter(partial, partial.end()));
    groups[partial].push_back(rank);
  }
  return groups;
}

// One detail line per rank whose group differs from the reference; its rank
// goes to `diverged` when it has operations the reference lacks, else to
// `late` (it only lags behind).
void compare_with_reference(int set, const std::vector<const RankDump*>& members,
                            const std::map<int, Labels>& pending,
                            const std::map<Labels, std::vector<int>>& groups, const Labels& ref,
                            std::vector<int>& diverged, std::vector<int>& late, Diagnosis& out) {
  auto holders = [&](const std::string& l) {
    std::vector<int> r;
    for (auto& [rank, labels] : pending)
      if (labels.count(l)) r.push_back(rank);
    return r;
  };
  for (const auto& [labels, ranks] : groups) {
    if (labels == ref) continue;
    Labels extra, missing;
    std::set_difference(labels.begin(), labels.end(), ref.begin(), ref.end(),
                        std::inserter(extra, extra.end()));
    std::set_difference(ref.begin(), ref.end(), labels.begin(), labels.end(),
                        std::inserter(missing, missing.end()));
    for (int r : ranks) {
      (extra.empty() ? late : diverged).push_back(r);
      std::string detail = fmt::format("process set {}: rank {}", set, r);
      if (!extra.empty())
        detail += fmt::format(" submitted {} that the others did not", labels_text(extra));
      if (!missing.empty())
        detail += fmt::format("{} never submitted {} (pending on {} for {:.1f} s)",
                              extra.empty() ? "" : ", and", labels_text(missing),
                              ranks_text(holders(*missing.begin())),
                              pending_age_us(members, set, *missing.begin()) / 1e6);
      out.details.push_back(detail);
    }
  }
}

// The late ranks stalled: the first is the one whose last engine activity
// is the oldest.
void stalled_verdict(const std::vector<const RankDump*>& members, std::vector<int> late,
                     Diagnosis& out) {
  const RankDump* first = nullptr;
  for (int r : late)
    for (const RankDump* d : members)
      if (d->rank == r && (!first || d->last_activity_us() < first->last_activity_us())) first = d;
  out.verdict = Verdict::kStalled;
  std::sort(late.begin(), late.end(), [&](int a, int b) {
    auto act = [&](int r) {
      for (const RankDump* d : members)
        if (d->rank == r) return d->last_activity_us();
      return int64_t{0};
    };
    return act(a) < act(b);
  });
  out.culprits = late;
  int64_t newest = 0;
  for (const RankDump* d : members) newest = std::max(newest, d->last_activity_us());
  out.summary = fmt::format(
      "rank {} stalled first: its last engine activity was {:.1f} s before the newest on any rank "
      "(it was busy outside lockstep, hung, or took another code path); {}",
      first->rank, (newest - first->last_activity_us()) / 1e6, out.details.front());
}

// Step 2 for one set; true when it reached a verdict.
bool judge_set(int set, const std::vector<const RankDump*>& members,
               const std::vector<RankDump>& dumps, Diagnosis& out) {
  std::map<int, Labels> pending;
  for (const RankDump* d : members) pending[d->rank] = pending_in(*d, set);
  const std::map<Labels, std::vector<int>> groups = partial_groups(pending);
  if (groups.size() < 2) return false;
  auto ref = reference(groups, dumps);
  if (!ref) {
    out.verdict = Verdict::kDiverged;
    std::vector<std::string> parts;
    for (const auto& [labels, ranks] : groups)
      parts.push_back(fmt::format("{} pending {}", ranks_text(ranks),
                                  labels.empty() ? "nothing" : labels_text(labels)));
    out.summary = fmt::format(
        "process set {}: ranks disagree on which operations to run ({}); "
        "their dumps cannot tell which is wrong",
        set, fmt::join(parts, "; "));
    return true;
  }
  std::vector<int> diverged, late;
  compare_with_reference(set, members, pending, groups, *ref, diverged, late, out);
  if (!diverged.empty()) {
    out.verdict = Verdict::kDiverged;
    out.culprits = diverged;
    out.summary = fmt::format("{} diverged first: {}", ranks_text(diverged), out.details.front());
    return true;
  }
  stalled_verdict(members, std::move(late), out);
  return true;
}

// Step 3: a rank behind the others in the negotiated order.
bool judge_frontier(int set, const std::vector<const RankDump*>& members, Diagnosis& out) {
  std::map<int, int64_t> done;
  for (const RankDump* d : members) {
    int64_t best = -1;
    for (const auto& o : d->operations)
      if (o.set == set && o.finished()) best = std::max(best, o.seq);
    done[d->rank] = best;
  }
  auto [lo, hi] = std::minmax_element(done.begin(), done.end(),
                                      [](auto& a, auto& b) { return a.second < b.second; });
  if (lo->second == hi->second) return false;
  out.verdict = Verdict::kStalled;
  out.culprits = {lo->first};
  out.summary = fmt::format(
      "rank {} stalled first: in process set {} it finished up to #{} while "
      "rank {} reached #{}",
      lo->first, set, lo->second, hi->first, hi->second);
  return true;
}

}  // namespace

int64_t RankDump::last_activity_us() const {
  int64_t t = 0;
  for (const auto& o : operations) t = std::max({t, o.submitted_us, o.finished_us});
  return t;
}

std::string verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kNone: return "none";
    case Verdict::kDied: return "died";
    case Verdict::kDiverged: return "diverged";
    case Verdict::kStalled: return "stalled";
    case Verdict::kMismatch: return "mismatch";
    case Verdict::kFailed: return "failed";
  }
  return "unknown";
}

Diagnosis diagnose(const std::vector<RankDump>& dumps) {
  Diagnosis out;
  if (dumps.empty()) {
    out.summary = "no flight-recorder dumps to compare";
    return out;
  }
  int size = 0;
  std::set<int> present;
  for (const auto& d : dumps) size = std::max(size, d.size), present.insert(d.rank);
  std::vector<int> missing;
  for (int r = 0; r < size; ++r)
    if (!present.count(r)) missing.push_back(r);
  if (!missing.empty()) {
    const RankDump& first = *std::min_element(
        dumps.begin(), dumps.end(), [](auto& a, auto& b) { return a.dumped_us < b.dumped_us; });
    out.verdict = Verdict::kDied;
    out.culprits = missing;
    out.summary = fmt::format(
        "{} left no dump: died or was killed before it could write one "
        "(read its own output first); rank {} failed with: {}",
        ranks_text(missing), first.rank, first.reason);
    return out;
  }
  auto sets = members_by_set(dumps);
  for (const auto& [set, members] : sets)
    if (judge_set(set, members, dumps, out)) return out;
  for (const auto& d : dumps)
    for (const auto& o : d.operations)
      if (o.state == "failed" && o.error_kind == "mismatch") {
        out.verdict = Verdict::kMismatch;
        out.summary = fmt::format("ranks disagree about {} (#{}): {}", label(o), o.seq, o.error);
        return out;
      }
  for (const auto& [set, members] : sets)
    if (judge_frontier(set, members, out)) return out;
  const RankDump& first = *std::min_element(
      dumps.begin(), dumps.end(), [](auto& a, auto& b) { return a.dumped_us < b.dumped_us; });
  if (first.reason.rfind("SIGUSR1", 0) == 0) {
    out.summary = "every rank agrees on its operations and none is behind";
    return out;
  }
  out.verdict = Verdict::kFailed;
  out.culprits = {first.rank};
  out.summary = fmt::format(
      "no rank diverged or fell behind; rank {} reported the first failure: "
      "{}",
      first.rank, first.reason);
  return out;
}

}  // namespace lockstep::doctor
