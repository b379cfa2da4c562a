// SPDX-License-Identifier: Apache-2.0
#include "tests/actors/metrics/exposition.hpp"

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace chargeonce::test {

namespace {

using labels_t = std::map<std::string, std::string>;

struct parsed_sample {
  std::string name;
  labels_t labels;
  double value = 0;
};

bool matches(const std::string& x, const char* pattern) {
  return std::regex_match(x, std::regex{pattern});
}

bool is_metric_name(const std::string& x) {
  return matches(x, "[a-zA-Z_:][a-zA-Z0-9_:]*");
}

bool is_label_name(const std::string& x) {
  return matches(x, "[a-zA-Z_][a-zA-Z0-9_]*") && x.rfind("__", 0) != 0;
}

/// Go's ParseFloat as Prometheus accepts it, without hex forms.
bool parse_float(const std::string& x, double& out) {
  if (!matches(x, R"([+-]?(Inf|NaN|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?))"))
    return false;
  if (x.find("Inf") != std::string::npos)
    out = x[0] == '-' ? -INFINITY : INFINITY;
  else if (x == "NaN")
    out = NAN;
  else
    out = std::stod(x);
  return true;
}

/// `name{a="x",b="y"} value [timestamp]`; an empty string when it parses.
std::string parse_sample(const std::string& line, parsed_sample& out) {
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ')
    ++i;
  out.name = line.substr(0, i);
  if (!is_metric_name(out.name))
    return "bad metric name '" + out.name + "'";
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      auto eq = line.find('=', i);
      if (eq == std::string::npos)
        return "label without '='";
      auto key = line.substr(i, eq - i);
      if (!is_label_name(key))
        return "bad label name '" + key + "'";
      i = eq + 1;
      if (i >= line.size() || line[i] != '"')
        return "label value not quoted";
      std::string value;
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] != '\\') {
          value += line[i];
          continue;
        }
        if (++i == line.size())
          return "dangling backslash";
        if (line[i] == 'n')
          value += '\n';
        else if (line[i] == '\\' || line[i] == '"')
          value += line[i];
        else
          return std::string{"bad escape \\"} + line[i];
      }
      if (i == line.size())
        return "unterminated label value";
      if (!out.labels.emplace(key, value).second)
        return "label '" + key + "' twice";
      ++i; // closing quote
      if (i < line.size() && line[i] == ',')
        ++i;
      else if (i >= line.size() || line[i] != '}')
        return "expected ',' or '}' after a label";
    }
    if (i == line.size())
      return "unterminated label set";
    ++i;
  }
  if (i >= line.size() || line[i] != ' ')
    return "expected one space before the value";
  std::istringstream rest{line.substr(i + 1)};
  std::string value, timestamp, extra;
  rest >> value >> timestamp >> extra;
  if (line.substr(i + 1).find("  ") != std::string::npos || !extra.empty())
    return "trailing garbage";
  if (!parse_float(value, out.value))
    return "bad value '" + value + "'";
  if (!timestamp.empty() && !matches(timestamp, "-?[0-9]+"))
    return "bad timestamp '" + timestamp + "'";
  return {};
}

/// One histogram series (a label set without `le`).
struct histogram_series {
  std::vector<std::pair<double, double>> buckets; ///< (le, cumulative count)
  bool has_sum = false;
  double count = -1;
};

class validator {
public:
  /// Empty when `text` is valid; else the first problem, with its line.
  std::string check(const std::string& text) {
    if (text.empty() || text.back() != '\n')
      return "text must end with a line feed";
    std::istringstream in{text};
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n)
      if (auto why = check_line(line); !why.empty())
        return "line " + std::to_string(n) + ": " + why + ": " + line;
    return finish_family();
  }

private:
  std::map<std::string, std::string> types_;
  std::set<std::string> helped_;
  std::set<std::string> done_; ///< families whose lines are over
  std::set<std::string> series_;
  std::string current_;
  std::map<labels_t, histogram_series> histograms_;

  std::string check_line(const std::string& line) {
    if (line.empty())
      return "empty line";
    if (line[0] == '#')
      return check_comment(line);
    parsed_sample s;
    if (auto why = parse_sample(line, s); !why.empty())
      return why;
    return check_sample(s);
  }

  /// Starts the lines of `family`; each family's lines are contiguous.
  std::string enter(const std::string& family) {
    if (family == current_)
      return {};
    if (auto why = finish_family(); !why.empty())
      return why;
    if (done_.count(family))
      return "lines of '" + family + "' are not contiguous";
    current_ = family;
    return {};
  }

  std::string check_comment(const std::string& line) {
    std::istringstream in{line};
    std::string hash, keyword, name, rest;
    in >> hash >> keyword >> name;
    std::getline(in, rest);
    if (hash != "#" || (keyword != "HELP" && keyword != "TYPE"))
      return "a comment other than HELP or TYPE";
    if (!is_metric_name(name))
      return "bad metric name in " + keyword;
    if (auto why = enter(name); !why.empty())
      return why;
    if (keyword == "HELP") {
      if (!helped_.insert(name).second)
        return "second HELP";
      if (rest.size() < 2 || rest[0] != ' ')
        return "empty HELP";
      for (size_t i = 1; i < rest.size(); ++i)
        if (rest[i] == '\\'
            && (++i == rest.size() || (rest[i] != '\\' && rest[i] != 'n')))
          return "bad escape in HELP";
      return {};
    }
    auto type = rest.size() > 1 ? rest.substr(1) : std::string{};
    static const std::set<std::string> known = {"counter", "gauge", "histogram",
                                                "summary", "untyped"};
    if (!known.count(type))
      return "unknown type '" + type + "'";
    if (types_.count(name))
      return "second TYPE";
    for (const auto& s : series_)
      if (s.rfind(name, 0) == 0)
        return "TYPE after samples";
    types_[name] = type;
    return {};
  }

  /// The family a sample belongs to: its own name, or a histogram's base.
  std::string family_of(const std::string& name) const {
    if (types_.count(name))
      return name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string s{suffix};
      if (name.size() > s.size()
          && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        auto base = name.substr(0, name.size() - s.size());
        auto i = types_.find(base);
        if (i != types_.end() && i->second == "histogram")
          return base;
      }
    }
    return {};
  }

  std::string check_sample(const parsed_sample& s) {
    auto family = family_of(s.name);
    if (family.empty())
      return "sample before its TYPE";
    if (auto why = enter(family); !why.empty())
      return why;
    std::ostringstream key;
    key << s.name;
    for (const auto& [k, v] : s.labels)
      key << '|' << k << '=' << v;
    if (!series_.insert(key.str()).second)
      return "duplicate series";
    const auto& type = types_[family];
    if (type == "counter") {
      if (s.name.size() < 6 || s.name.substr(s.name.size() - 6) != "_total")
        return "counter name without _total";
      if (!(s.value >= 0) || std::isinf(s.value))
        return "counter value not a finite non-negative number";
    }
    if (type == "histogram")
      return check_histogram_sample(family, s);
    return {};
  }

  std::string check_histogram_sample(const std::string& family,
                                     const parsed_sample& s) {
    auto labels = s.labels;
    if (s.name == family + "_bucket") {
      auto le = labels.find("le");
      if (le == labels.end())
        return "bucket without le";
      double bound = 0;
      if (!parse_float(le->second, bound))
        return "bad le";
      labels.erase(le);
      auto& h = histograms_[labels];
      if (!h.buckets.empty() && !(bound > h.buckets.back().first))
        return "le not increasing";
      if (!h.buckets.empty() && s.value < h.buckets.back().second)
        return "buckets not cumulative";
      h.buckets.emplace_back(bound, s.value);
      return {};
    }
    if (labels.count("le"))
      return "le outside a bucket";
    auto& h = histograms_[labels];
    if (s.name == family + "_sum")
      h.has_sum = true;
    else
      h.count = s.value;
    return {};
  }

  std::string finish_family() {
    if (!current_.empty())
      done_.insert(current_);
    for (const auto& [labels, h] : histograms_) {
      if (h.buckets.empty() || !std::isinf(h.buckets.back().first))
        return current_ + ": buckets do not end with le=\"+Inf\"";
      if (!h.has_sum || h.count < 0)
        return current_ + ": _sum or _count missing";
      if (h.count != h.buckets.back().second)
        return current_ + ": _count differs from the +Inf bucket";
    }
    histograms_.clear();
    return {};
  }
};

} // namespace

std::string validate(const std::string& text) {
  return validator{}.check(text);
}

double value_of(const std::string& text, const std::string& series) {
  std::istringstream in{text};
  std::string line;
  while (std::getline(in, line))
    if (line.size() > series.size()
        && line.compare(0, series.size(), series) == 0
        && line[series.size()] == ' ')
      return std::stod(line.substr(series.size() + 1));
  return -1;
}

std::string ops(const char* op, const char* outcome) {
  return std::string{"chargeonce_operations_total{operation=\""} + op
         + "\",outcome=\"" + outcome + "\"}";
}

std::string duration_bucket(const char* op, const char* le) {
  return std::string{
           "chargeonce_operation_duration_seconds_bucket{operation=\""}
         + op + "\",le=\"" + le + "\"}";
}

} // namespace chargeonce::test
