// SPDX-License-Identifier: Apache-2.0
#include "protocol/catalog.hpp"

#include <algorithm>
#include <regex>
#include <set>

namespace chargeonce {

namespace {

using ojson = nlohmann::ordered_json;

// Bounds that keep a catalog something an operator can read and a
// statement can carry; far above any product list seen.
constexpr size_t kinds_max = 64;
constexpr int32_t price_max = 1'000'000;
constexpr int32_t quota_max = 1'000'000;

bool is_queue_name(const std::string& x) {
  static const std::regex pattern{"[A-Za-z0-9_.:-]{1,128}"};
  return std::regex_match(x, pattern);
}

std::string in_quotes(const std::string& x) {
  return "\"" + x + "\"";
}

/// The first key that appears twice in one object, as "a.b.key"; empty when
/// none. nlohmann keeps one of the two silently, so it is found while
/// parsing.
class duplicate_finder {
public:
  bool operator()(int, ojson::parse_event_t event, ojson& parsed) {
    using ev = ojson::parse_event_t;
    switch (event) {
    case ev::object_start:
      keys_.emplace_back();
      path_.push_back(last_key_);
      break;
    case ev::object_end:
      keys_.pop_back();
      path_.pop_back();
      break;
    case ev::key: {
      last_key_ = parsed.get<std::string>();
      if (!keys_.empty() && !keys_.back().insert(last_key_).second
          && duplicate_.empty())
        duplicate_ = where() + last_key_;
      break;
    }
    default:
      break;
    }
    return true;
  }

  const std::string& duplicate() const { return duplicate_; }

private:
  std::string where() const {
    std::string out;
    for (const auto& part : path_)
      if (!part.empty())
        out += part + ".";
    return out;
  }

  std::vector<std::set<std::string>> keys_;
  std::vector<std::string> path_;
  std::string last_key_;
  std::string duplicate_;
};

/// Refuses fields other than `known` in `object`, naming `owner`.
std::string only_fields(const ojson& object, const std::string& owner,
                        std::initializer_list<const char*> known) {
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    if (std::none_of(known.begin(), known.end(),
                     [&](const char* k) { return key == k; }))
      return owner + ": unknown field " + in_quotes(key);
  }
  return {};
}

/// Reads an integer field; `problem` names the owner when it is not one.
bool read_int(const ojson& value, const std::string& what, int32_t& out,
              std::string& problem) {
  if (!value.is_number_integer()) {
    problem = what + " must be an integer";
    return false;
  }
  auto x = value.get<int64_t>();
  if (x < INT32_MIN || x > INT32_MAX) {
    problem = what + " is out of range";
    return false;
  }
  out = static_cast<int32_t>(x);
  return true;
}

std::string read_pocket(const std::string& name, const ojson& body,
                        pocket_spec& out) {
  auto owner = "pocket " + name;
  if (!body.is_object())
    return owner + " must be an object";
  if (auto p = only_fields(body, owner, {"daily", "purchased"}); !p.empty())
    return p;
  out.name = name;
  if (body.contains("purchased")) {
    if (!body["purchased"].is_boolean())
      return owner + ": purchased must be true or false";
    out.purchased = body["purchased"].get<bool>();
  }
  if (out.purchased && body.contains("daily"))
    return owner + " is purchased: it has no daily quota";
  if (out.purchased)
    return {};
  if (!body.contains("daily"))
    return owner
           + " needs a daily quota {\"free\": N, \"premium\": N} "
             "(or \"purchased\": true, for balance)";
  const auto& daily = body["daily"];
  if (!daily.is_object())
    return owner + ": daily must be an object {\"free\": N, \"premium\": N}";
  if (auto p = only_fields(daily, owner + " daily", {"free", "premium"});
      !p.empty())
    return p;
  std::string problem;
  for (auto [plan, field] : {std::pair{"free", &out.free_daily},
                             std::pair{"premium", &out.premium_daily}}) {
    if (!daily.contains(plan))
      return owner + ": daily." + plan + " is missing";
    if (!read_int(daily[plan], owner + ": daily." + plan, *field, problem))
      return problem;
  }
  return {};
}

std::string read_source(const std::string& owner, const ojson& body,
                        payment_source& out) {
  if (!body.is_object() || !body.contains("pocket")
      || !body["pocket"].is_string())
    return owner
           + ": each pay_from entry needs {\"pocket\": NAME, "
             "\"price\": N}";
  if (auto p = only_fields(body, owner + " pay_from", {"pocket", "price"});
      !p.empty())
    return p;
  out.pocket = body["pocket"].get<std::string>();
  std::string problem;
  if (body.contains("price")
      && !read_int(body["price"], owner + ": price of " + out.pocket, out.price,
                   problem))
    return problem;
  return {};
}

std::string read_string(const ojson& body, const char* field,
                        const std::string& owner, std::string& out) {
  if (!body.contains(field))
    return {};
  if (!body[field].is_string())
    return owner + ": " + field + " must be a string";
  out = body[field].get<std::string>();
  return {};
}

std::string read_kind(const std::string& name, const ojson& body,
                      kind_spec& out) {
  auto owner = "kind " + name;
  if (!body.is_object())
    return owner + " must be an object";
  if (auto p = only_fields(body, owner,
                           {"pay_from", "premium_free", "queue",
                            "priority_queue", "cancel_after_start"});
      !p.empty())
    return p;
  out.name = name;
  out.queue = name + "_generation";
  out.priority_queue = name + "_generation_priority";
  if (!body.contains("pay_from") || !body["pay_from"].is_array())
    return owner + " needs pay_from: the pockets it is paid from, in order";
  for (const auto& entry : body["pay_from"]) {
    payment_source source;
    if (auto p = read_source(owner, entry, source); !p.empty())
      return p;
    out.pay_from.push_back(source);
  }
  if (body.contains("premium_free")) {
    if (!body["premium_free"].is_boolean())
      return owner + ": premium_free must be true or false";
    out.premium_free = body["premium_free"].get<bool>();
  }
  for (auto [field, target] :
       {std::pair{"queue", &out.queue},
        std::pair{"priority_queue", &out.priority_queue}})
    if (auto p = read_string(body, field, owner, *target); !p.empty())
      return p;
  std::string policy = to_string(out.cancel_after_start);
  if (auto p = read_string(body, "cancel_after_start", owner, policy);
      !p.empty())
    return p;
  if (!from_string(policy, out.cancel_after_start))
    return owner
           + ": cancel_after_start must be \"refuse\" or \"request\", "
             "not "
           + in_quotes(policy);
  return {};
}

std::string check_kind(const catalog& c, const kind_spec& k) {
  auto owner = "kind " + k.name;
  if (!is_catalog_name(k.name))
    return "kind name " + in_quotes(k.name)
           + " must match [a-z][a-z0-9_]{0,31}";
  if (k.pay_from.empty())
    return owner + " has no way to pay: pay_from is empty";
  std::set<std::string> seen;
  for (size_t i = 0; i < k.pay_from.size(); ++i) {
    const auto& source = k.pay_from[i];
    if (c.find_pocket(source.pocket) == nullptr)
      return owner + " is paid from unknown pocket " + in_quotes(source.pocket);
    if (!seen.insert(source.pocket).second)
      return owner + " lists pocket " + source.pocket + " twice";
    if (source.price <= 0 || source.price > price_max)
      return owner + ": price of " + source.pocket + " must be 1 to "
             + std::to_string(price_max) + ", not "
             + std::to_string(source.price);
    // What expires first is spent first: purchased credits never expire.
    if (i > 0 && k.pay_from[i - 1].pocket == pocket::balance)
      return owner + " pays from balance before daily pocket " + source.pocket
             + ": what expires first must be spent first, so balance comes "
               "last";
  }
  for (const auto* queue : {&k.queue, &k.priority_queue})
    if (!is_queue_name(*queue))
      return owner + ": queue name " + in_quotes(*queue)
             + " must be 1 to 128 of A-Z a-z 0-9 _ . : -";
  return {};
}

std::string check_pocket(const pocket_spec& p) {
  if (!is_catalog_name(p.name))
    return "pocket name " + in_quotes(p.name)
           + " must match [a-z][a-z0-9_]{0,31}";
  if (p.name == pocket::balance && !p.purchased)
    return "pocket balance is the purchased pocket: {\"purchased\": true}";
  if (p.name != pocket::balance && p.purchased)
    return "pocket " + p.name
           + " cannot be purchased: balance is the one purchased pocket";
  for (auto [plan, value] :
       {std::pair{"free", p.free_daily}, std::pair{"premium", p.premium_daily}})
    if (value < 0 || value > quota_max)
      return "pocket " + p.name + ": daily." + plan + " must be 0 to "
             + std::to_string(quota_max) + ", not " + std::to_string(value);
  return {};
}

} // namespace

const char* to_string(cancel_policy x) {
  return x == cancel_policy::request ? "request" : "refuse";
}

bool from_string(const std::string& text, cancel_policy& out) {
  if (text != "refuse" && text != "request")
    return false;
  out = text == "request" ? cancel_policy::request : cancel_policy::refuse;
  return true;
}

const kind_spec* catalog::find_kind(const std::string& name) const {
  auto i = std::find_if(kinds.begin(), kinds.end(),
                        [&](const kind_spec& k) { return k.name == name; });
  return i == kinds.end() ? nullptr : &*i;
}

const pocket_spec* catalog::find_pocket(const std::string& name) const {
  auto i = std::find_if(pockets.begin(), pockets.end(),
                        [&](const pocket_spec& p) { return p.name == name; });
  return i == pockets.end() ? nullptr : &*i;
}

namespace {

std::string sorted_list(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& name : names)
    out += (out.empty() ? "" : ", ") + name;
  return out;
}

} // namespace

std::string catalog::kind_names() const {
  std::vector<std::string> names;
  for (const auto& k : kinds)
    names.push_back(k.name);
  return sorted_list(std::move(names));
}

std::string catalog::pocket_names() const {
  std::vector<std::string> names;
  for (const auto& p : pockets)
    names.push_back(p.name);
  return sorted_list(std::move(names));
}

chargeonce::pockets catalog::daily_quotas(bool premium) const {
  chargeonce::pockets out;
  for (const auto& p : pockets)
    if (!p.purchased)
      out.set(p.name, premium ? p.premium_daily : p.free_daily);
  return out;
}

catalog builtin_catalog(const builtin_quotas& q) {
  catalog out;
  out.pockets = {{"daily_messages", false, q.free_messages, q.premium_messages},
                 {"daily_images", false, q.free_images, q.premium_images},
                 {pocket::balance, true, 0, 0}};
  out.kinds = {{"text",
                {{"daily_messages", 1}},
                true,
                "text_generation",
                "text_generation_priority",
                cancel_policy::refuse},
               {"image",
                {{"daily_images", 1}, {pocket::balance, 1}},
                false,
                "image_generation",
                "image_generation_priority",
                cancel_policy::refuse}};
  return out;
}

std::string validate(const catalog& x) {
  if (x.kinds.empty())
    return "the catalog has no kinds";
  if (x.kinds.size() > kinds_max)
    return "the catalog has " + std::to_string(x.kinds.size())
           + " kinds, at most " + std::to_string(kinds_max);
  if (x.pockets.size() > catalog_pockets_max)
    return "the catalog has " + std::to_string(x.pockets.size())
           + " pockets, at most " + std::to_string(catalog_pockets_max);
  std::set<std::string> names;
  for (const auto& p : x.pockets) {
    if (!names.insert(p.name).second)
      return "pocket " + p.name + " is defined twice";
    if (auto problem = check_pocket(p); !problem.empty())
      return problem;
  }
  if (x.find_pocket(pocket::balance) == nullptr)
    return "the catalog has no balance pocket (top-ups credit it)";
  names.clear();
  for (const auto& k : x.kinds) {
    if (!names.insert(k.name).second)
      return "kind " + k.name + " is defined twice";
    if (auto problem = check_kind(x, k); !problem.empty())
      return problem;
  }
  return {};
}

std::string parse_catalog(const std::string& text, catalog& out) {
  duplicate_finder duplicates;
  ojson doc;
  try {
    doc = ojson::parse(text, std::ref(duplicates));
  } catch (const nlohmann::json::exception& e) {
    return std::string{"the catalog is not valid JSON: "} + e.what();
  }
  if (!duplicates.duplicate().empty())
    return "the catalog names " + in_quotes(duplicates.duplicate()) + " twice";
  if (!doc.is_object())
    return "the catalog must be a JSON object {\"pockets\": …, \"kinds\": …}";
  if (auto p = only_fields(doc, "the catalog", {"pockets", "kinds"});
      !p.empty())
    return p;
  for (const char* part : {"pockets", "kinds"})
    if (!doc.contains(part) || !doc[part].is_object())
      return std::string{"the catalog needs \""} + part + "\": an object";
  catalog result;
  for (const auto& [name, body] : doc["pockets"].items()) {
    pocket_spec p;
    if (auto problem = read_pocket(name, body, p); !problem.empty())
      return problem;
    result.pockets.push_back(std::move(p));
  }
  // Top-ups credit balance whatever the products: it is always there.
  if (result.find_pocket(pocket::balance) == nullptr)
    result.pockets.push_back({pocket::balance, true, 0, 0});
  for (const auto& [name, body] : doc["kinds"].items()) {
    kind_spec k;
    if (auto problem = read_kind(name, body, k); !problem.empty())
      return problem;
    result.kinds.push_back(std::move(k));
  }
  if (auto problem = validate(result); !problem.empty())
    return problem;
  out = std::move(result);
  return {};
}

nlohmann::ordered_json to_json(const catalog& x) {
  ojson pockets = ojson::object();
  for (const auto& p : x.pockets) {
    if (p.purchased)
      pockets[p.name] = {{"purchased", true}};
    else
      pockets[p.name] = {
        {"daily", {{"free", p.free_daily}, {"premium", p.premium_daily}}}};
  }
  ojson kinds = ojson::object();
  for (const auto& k : x.kinds) {
    ojson pay_from = ojson::array();
    for (const auto& s : k.pay_from)
      pay_from.push_back({{"pocket", s.pocket}, {"price", s.price}});
    kinds[k.name] = {{"pay_from", pay_from},
                     {"premium_free", k.premium_free},
                     {"queue", k.queue},
                     {"priority_queue", k.priority_queue},
                     {"cancel_after_start", to_string(k.cancel_after_start)}};
  }
  return {{"pockets", pockets}, {"kinds", kinds}};
}

catalog generated_catalog(std::mt19937_64& rng) {
  auto pick = [&](int n) {
    return static_cast<int>(rng() % uint64_t(n));
  };
  catalog out;
  auto dailies = 1 + pick(4);
  for (int i = 0; i < dailies; ++i)
    out.pockets.push_back(
      {"daily_" + std::to_string(i), false, pick(4), 2 + pick(4)});
  out.pockets.push_back({pocket::balance, true, 0, 0});
  auto kinds = 2 + pick(3);
  for (int i = 0; i < kinds; ++i) {
    kind_spec k;
    k.name = "kind_" + std::to_string(i);
    std::vector<std::string> from;
    for (const auto& p : out.pockets)
      if (!p.purchased)
        from.push_back(p.name);
    std::shuffle(from.begin(), from.end(), rng);
    from.resize(std::min<size_t>(from.size(), pick(3)));
    if (from.empty() || pick(2) == 0)
      from.push_back(pocket::balance);
    for (const auto& name : from)
      k.pay_from.push_back({name, 1 + pick(3)});
    k.premium_free = pick(4) == 0;
    k.queue = k.name + "_generation";
    k.priority_queue = k.name + "_generation_priority";
    out.kinds.push_back(std::move(k));
  }
  return out;
}

} // namespace chargeonce
