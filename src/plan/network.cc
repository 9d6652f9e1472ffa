#include "lockstep/plan/network.h"

#include <cmath>
#include <filesystem>

#include "lockstep/base/json_fields.h"

namespace lockstep::plan {

using lockstep::detail::Fields;
using lockstep::detail::parse_text;
using lockstep::detail::read_file;
using lockstep::detail::write_file;
using nlohmann::json;

bool NetworkModel::has(std::string_view transport) const {
  return transports.count(std::string(transport)) > 0;
}

AlphaBeta AlgorithmModel::at(double bytes) const {
  if (bands.empty()) return cost;
  if (bytes <= double(bands.front().max_bytes)) return bands.front().cost;
  for (size_t i = 0; i + 1 < bands.size(); ++i) {
    const SizeBand &lo = bands[i], &hi = bands[i + 1];
    if (bytes >= double(hi.min_bytes)) continue;
    if (bytes <= double(lo.max_bytes)) return lo.cost;
    // Between the last size measured by `lo` and the first measured by
    // `hi`: neither line was fitted here, so blend them (the cost is linear
    // in alpha and beta, so this blends the two lines' costs).
    double w = std::log(bytes / double(lo.max_bytes)) /
               std::log(double(hi.min_bytes) / double(lo.max_bytes));
    return {(1 - w) * lo.cost.alpha_s + w * hi.cost.alpha_s,
            (1 - w) * lo.cost.beta_s_per_byte + w * hi.cost.beta_s_per_byte};
  }
  return bands.back().cost;
}

AlphaBeta NetworkModel::cost(std::string_view transport, std::string_view algo,
                             double bytes) const {
  return algorithm(transport, algo).at(bytes);
}

const AlgorithmModel& NetworkModel::algorithm(std::string_view transport,
                                              std::string_view algorithm) const {
  auto t = transports.find(std::string(transport));
  if (t == transports.end())
    throw InvalidArgument(fmt::format(
        "network '{}' has no {} costs: fit them with `lockstep bench fit --backend {}` or add a "
        "preset (--network NAME) that has them",
        name, transport, transport));
  auto a = t->second.find(std::string(algorithm));
  if (a == t->second.end())
    throw InvalidArgument(fmt::format(
        "network '{}' has no cost for {} {} (its fit saw no message sizes that use it; widen "
        "`lockstep bench fit --sizes`)",
        name, transport, algorithm));
  return a->second;
}

HostModel default_host() {
  // This class of machine (docs/plan.md): ~10 GB/s memcpy, ~5 GB/s for an
  // f32 sum of two streams, ~20 us to wake the engine's thread per cycle.
  return {.gamma_s_per_byte = 2e-10, .copy_s_per_byte = 1e-10, .cycle_overhead_s = 20e-6};
}

NetworkModel merge(NetworkModel base, const NetworkModel& overlay) {
  if (base.name.empty())
    base.name = overlay.name;
  else if (!overlay.name.empty())
    base.name += " + " + overlay.name;
  if (!overlay.description.empty())
    base.description = base.description.empty() ? overlay.description
                                                : base.description + "; " + overlay.description;
  base.preset = base.preset || overlay.preset;
  if (overlay.host) base.host = overlay.host;
  for (const auto& [name, algos] : overlay.transports) {
    base.transports[name] = algos;
    if (name == "shm") {
      base.shm_small_bytes = overlay.shm_small_bytes;
      base.shm_slot_bytes = overlay.shm_slot_bytes;
      base.shm_nodes = overlay.shm_nodes;
    }
  }
  if (!overlay.transports.empty() && overlay.transports.count("shm") == 0)
    base.nic_shared = overlay.nic_shared;
  base.points.insert(base.points.end(), overlay.points.begin(), overlay.points.end());
  return base;
}

namespace {

// alpha_s, beta_s_per_byte and the optional fit: an algorithm's line or a band's.
void parse_line(const Fields& f, AlphaBeta& cost, FitQuality& fit) {
  cost.alpha_s = f.non_negative("alpha_s");
  cost.beta_s_per_byte = f.non_negative("beta_s_per_byte");
  if (f.has("fit")) {
    Fields q(f.object("fit"), f.where("fit"));
    fit.points = static_cast<int>(q.integer("points"));
    fit.rms_rel_error = q.non_negative("rms_rel_error");
    fit.max_rel_error = q.non_negative("max_rel_error");
  }
}

json line_json(const AlphaBeta& cost, const FitQuality& fit) {
  json body = {{"alpha_s", cost.alpha_s}, {"beta_s_per_byte", cost.beta_s_per_byte}};
  if (fit.points > 0)
    body["fit"] = {{"points", fit.points},
                   {"rms_rel_error", fit.rms_rel_error},
                   {"max_rel_error", fit.max_rel_error}};
  return body;
}

AlgorithmModel parse_algorithm(const json& j, const std::string& where) {
  Fields f(j, where);
  AlgorithmModel a;
  parse_line(f, a.cost, a.fit);
  if (!f.has("bands")) return a;
  const json& bands = f.array("bands");
  for (size_t i = 0; i < bands.size(); ++i) {
    Fields b(bands[i], fmt::format("{}.bands[{}]", where, i));
    SizeBand band;
    band.min_bytes = b.integer("min_bytes");
    band.max_bytes = b.integer("max_bytes");
    parse_line(b, band.cost, band.fit);
    if (band.min_bytes < 0 || band.max_bytes < band.min_bytes ||
        (!a.bands.empty() && band.min_bytes <= a.bands.back().max_bytes))
      throw InvalidArgument(fmt::format(
          "{}.bands[{}]: min_bytes {} .. max_bytes {} must be a range above the previous band's",
          where, i, band.min_bytes, band.max_bytes));
    a.bands.push_back(band);
  }
  return a;
}

MeasuredPoint parse_point(const json& j, const std::string& where) {
  Fields f(j, where);
  return {f.text("transport"), f.text("algorithm"),          static_cast<int>(f.integer("np")),
          f.integer("bytes"),  f.non_negative("measured_s"), f.non_negative("fitted_s")};
}

}  // namespace

NetworkModel parse_network(std::string_view text, std::string_view source) {
  json j = parse_text(text, source);
  Fields f(j, std::string(source));
  if (f.text("schema") != kNetworkSchema)
    throw InvalidArgument(fmt::format("{}: schema '{}' is not {} (a lockstep network model)",
                                      source, f.text("schema"), kNetworkSchema));
  NetworkModel m;
  m.name = f.text("name");
  m.description = f.text_or("description", "");
  m.preset = f.flag_or("preset", false);
  m.shm_small_bytes = f.integer_or("shm_small_bytes", m.shm_small_bytes);
  m.shm_slot_bytes = f.integer_or("shm_slot_bytes", m.shm_slot_bytes);
  m.shm_nodes = static_cast<int>(f.integer_or("shm_nodes", m.shm_nodes));
  m.nic_shared = f.flag_or("nic_shared", true);
  if (f.has("host")) {
    Fields h(f.object("host"), f.where("host"));
    m.host = HostModel{h.non_negative("gamma_s_per_byte"), h.non_negative("copy_s_per_byte"),
                       h.non_negative("cycle_overhead_s")};
  }
  const json& transports = f.object("transports");
  for (const auto& [name, algos] : transports.items()) {
    std::string where = fmt::format("{}.transports.{}", source, name);
    if (name != "shm" && name != "gloo" && name != "mpi" && name != "nccl")
      throw InvalidArgument(fmt::format("{}: unknown transport (shm gloo mpi nccl)", where));
    if (!algos.is_object()) throw InvalidArgument(fmt::format("{}: expected an object", where));
    for (const auto& [algo, body] : algos.items())
      m.transports[name][algo] = parse_algorithm(body, where + "." + algo);
  }
  if (f.has("points")) {
    const json& points = f.array("points");
    for (size_t i = 0; i < points.size(); ++i)
      m.points.push_back(parse_point(points[i], fmt::format("{}.points[{}]", source, i)));
  }
  return m;
}

std::string network_to_json(const NetworkModel& m) {
  json transports = json::object();
  for (const auto& [name, algos] : m.transports)
    for (const auto& [algo, a] : algos) {
      json body = line_json(a.cost, a.fit);
      if (!a.bands.empty()) {
        json bands = json::array();
        for (const auto& b : a.bands) {
          json band = line_json(b.cost, b.fit);
          band["min_bytes"] = b.min_bytes;
          band["max_bytes"] = b.max_bytes;
          bands.push_back(band);
        }
        body["bands"] = bands;
      }
      transports[name][algo] = body;
    }
  json j = {{"schema", kNetworkSchema},
            {"name", m.name},
            {"description", m.description},
            {"preset", m.preset},
            {"shm_small_bytes", m.shm_small_bytes},
            {"shm_slot_bytes", m.shm_slot_bytes},
            {"shm_nodes", m.shm_nodes},
            {"nic_shared", m.nic_shared},
            {"transports", transports}};
  if (m.host)
    j["host"] = {{"gamma_s_per_byte", m.host->gamma_s_per_byte},
                 {"copy_s_per_byte", m.host->copy_s_per_byte},
                 {"cycle_overhead_s", m.host->cycle_overhead_s}};
  json points = json::array();
  for (const auto& p : m.points)
    points.push_back({{"transport", p.transport},
                      {"algorithm", p.algorithm},
                      {"np", p.np},
                      {"bytes", p.bytes},
                      {"measured_s", p.measured_s},
                      {"fitted_s", p.fitted_s}});
  j["points"] = points;
  return j.dump(1) + "\n";
}

NetworkModel load_network(const std::string& path) {
  return parse_network(read_file(path, "network model"), path);
}

void save_network(const std::string& path, const NetworkModel& m) {
  write_file(path, network_to_json(m));
}

NetworkModel resolve_network(const std::vector<std::string>& specs) {
  if (specs.empty())
    throw InvalidArgument(
        "no network given: pass --network with a preset name (lockstep plan "
        "--list-presets) or a file written by `lockstep bench fit`");
  NetworkModel out;
  for (const auto& spec : specs) {
    if (const NetworkModel* p = find_preset(spec)) {
      out = merge(std::move(out), *p);
    } else if (std::filesystem::exists(spec)) {
      out = merge(std::move(out), load_network(spec));
    } else {
      throw InvalidArgument(fmt::format(
          "--network {}: neither a preset nor a file (presets: lockstep plan --list-presets)",
          spec));
    }
  }
  if (!out.host) {
    out.host = default_host();
    out.description += out.description.empty() ? "" : "; ";
    out.description += "host costs: defaults (no fitted host section)";
  }
  return out;
}

}  // namespace lockstep::plan
