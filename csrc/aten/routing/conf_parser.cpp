#include "aten/routing/conf_parser.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

namespace torch_fl::conf {
namespace {

// Why a table file could not be read, for the error message.
std::string unreadable_reason(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    return "no such file";
  }
  if (std::filesystem::is_directory(status)) {
    return "it is a directory, not a table file";
  }
  if (!std::filesystem::is_regular_file(status)) {
    return "not a regular file";
  }
  return "not readable by this process (check its permissions)";
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

std::string trim(const std::string& s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && is_space(s[b])) {
    ++b;
  }
  while (e > b && is_space(s[e - 1])) {
    --e;
  }
  return s.substr(b, e - b);
}

// `text` split at every `sep`, each piece trimmed (empty pieces kept: "a,,b" has three).
std::vector<std::string> split_trimmed(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(sep, pos);
    if (end == std::string::npos) {
      end = text.size();
    }
    out.push_back(trim(text.substr(pos, end - pos)));
    pos = end + 1;
  }
  return out;
}

bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool is_ident(char c) {
  return is_ident_start(c) || (c >= '0' && c <= '9');
}

bool is_identifier(const std::string& s) {
  if (s.empty() || !is_ident_start(s[0])) {
    return false;
  }
  for (char c : s) {
    if (!is_ident(c)) {
      return false;
    }
  }
  return true;
}

// The length of the valid UTF-8 sequence starting at text[i], or 0.
size_t utf8_length(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t n = 0;
  uint32_t code = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2, code = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3, code = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4, code = lead & 0x07;
  } else {
    return 0;
  }
  if (i + n > text.size()) {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) {
      return 0;
    }
    code = (code << 6) | (byte(i + k) & 0x3f);
  }
  const bool overlong = (n == 3 && code < 0x800) || (n == 4 && code < 0x10000);
  const bool surrogate = code >= 0xd800 && code <= 0xdfff;
  return overlong || surrogate || code > 0x10ffff ? 0 : n;
}

// Printable form of a line for error messages (escaped, long lines cut).
std::string shown(const std::string& text) {
  std::string out = printable(text);
  if (out.size() > 200) {
    size_t cut = 200;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xc0) == 0x80) {
      --cut; // not inside a UTF-8 sequence
    }
    out.resize(cut);
    out += "...";
  }
  return out;
}

} // namespace

std::string printable(const std::string& text) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = c >= 0x80 ? utf8_length(text, i) : 1;
    if (n == 3 && text.compare(i, 3, "\xef\xbb\xbf") == 0) {
      out += "\\ufeff";
    } else if (n > 1 || (c < 0x80 && ((c >= 0x20 && c != 0x7f) || c == '\n'))) {
      out.append(text, i, n);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    }
    i += n == 0 ? 1 : n;
  }
  return out;
}

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) {
      out += ", ";
    }
    out += s;
  }
  return out;
}

std::string normal_path(const std::string& p) {
  return std::filesystem::path(p).lexically_normal().string();
}

std::string resolve_include(const std::string& including, const std::string& target) {
  std::filesystem::path t(target);
  if (t.is_absolute()) {
    return normal_path(target);
  }
  return normal_path((std::filesystem::path(including).parent_path() / t).string());
}

class Parser {
 public:
  explicit Parser(const Options& options) : options_(options) {}

  void parse(const std::string& text, const std::string& path) {
    stack_.push_back(path);
    std::string line;
    int number = 0;
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) {
        nl = text.size();
      }
      line.assign(text, pos, nl - pos);
      ++number;
      parse_line(line, path, number);
      pos = nl + 1;
    }
    stack_.pop_back();
  }

  std::vector<Entry> take() {
    return std::move(entries_);
  }

 private:
  // Where a line is, for error messages.
  struct Line {
    const std::string& path;
    int number;
    const std::string& raw;
  };

  [[noreturn]] void fail(const Line& line, const std::string& what) {
    fail(line.path, line.number, line.raw, what);
  }

  [[noreturn]] void fail(
      const std::string& path, int number, const std::string& raw, const std::string& what) {
    std::ostringstream os;
    os << printable(path) << ":" << number << ": " << printable(what) << "\n  " << number << " | "
       << shown(raw);
    throw ConfError(os.str());
  }

  void parse_line(const std::string& raw, const std::string& path, int number) {
    std::string body = raw;
    if (auto hash = body.find('#'); hash != std::string::npos) {
      body.resize(hash);
    }
    body = trim(body);
    if (body.empty()) {
      return;
    }
    if (body.rfind("include", 0) == 0 && (body.size() == 7 || is_space(body[7]))) {
      include(trim(body.substr(7)), path, number, raw);
      return;
    }
    std::string lhs;
    std::string rhs;
    std::optional<Condition> when;
    const auto eq = body.find('=');
    const auto open = body.find('[');
    if (open != std::string::npos && open < eq) {
      // <op> [<conditions>] = <route>: the conditions may hold '=' themselves.
      const auto close = body.find(']', open);
      if (close == std::string::npos) {
        fail(path, number, raw, "malformed size rule: '[' without a closing ']'");
      }
      const std::string rest = trim(body.substr(close + 1));
      if (rest.empty() || rest[0] != '=' || rest.find('=', 1) != std::string::npos) {
        fail(
            path,
            number,
            raw,
            "malformed size rule: expected '<op>.<overload> [<conditions>] = <route>'");
      }
      lhs = trim(body.substr(0, open));
      rhs = trim(rest.substr(1));
      when = parse_conditions(body.substr(open + 1, close - open - 1), Line{path, number, raw});
    } else {
      if (eq == std::string::npos || body.find('=', eq + 1) != std::string::npos) {
        fail(
            path,
            number,
            raw,
            "malformed line: expected '<op>.<overload> = <route>', "
            "'<op>.<overload> [<conditions>] = <route>' or 'include <file>'");
      }
      lhs = trim(body.substr(0, eq));
      rhs = trim(body.substr(eq + 1));
    }
    const auto op = canonical_op_name(lhs);
    if (!op) {
      fail(
          path,
          number,
          raw,
          "malformed operator name '" + lhs +
              "': expected <op>.<overload> as in torch.ops.aten (e.g. add.Tensor, relu, "
              "aten::mm.default)");
    }
    bool known_route = false;
    for (const auto& r : options_.routes) {
      known_route = known_route || r == rhs;
    }
    if (!known_route) {
      fail(
          path, number, raw, "unknown route '" + rhs + "'; valid routes: " + join(options_.routes));
    }
    if (options_.check_op) {
      std::string why = options_.check_op(*op);
      if (!why.empty()) {
        fail(path, number, raw, "unknown operator '" + *op + "': " + why);
      }
    }
    entries_.push_back(Entry{*op, rhs, path, number, std::move(when)});
  }

  static constexpr const char* kConditionForms =
      "conditions are 'numel <|<=|>|>= <integer>' and 'dtype = <dtype>[|<dtype>...]', "
      "separated by commas";

  // The part between '[' and ']' of a size rule.
  Condition parse_conditions(const std::string& text, const Line& line) {
    Condition c;
    bool dtype_seen = false;
    for (const std::string& item : split_trimmed(text, ',')) {
      if (item.empty()) {
        fail(line, std::string("empty condition; ") + kConditionForms);
      }
      size_t key_end = 0;
      while (key_end < item.size() && is_ident(item[key_end])) {
        ++key_end;
      }
      const std::string key = item.substr(0, key_end);
      const std::string rest = trim(item.substr(key_end));
      if (key == "numel") {
        parse_numel(rest, c, item, line);
      } else if (key == "dtype") {
        if (dtype_seen) {
          fail(line, "dtype is given twice in one rule; write 'dtype = a|b'");
        }
        dtype_seen = true;
        parse_dtypes(rest, c, item, line);
      } else {
        fail(line, "unknown condition '" + item + "'; " + kConditionForms);
      }
      c.text += (c.text.empty() ? "" : ", ") + item;
    }
    if (c.min_numel > c.max_numel) {
      fail(
          line,
          "the conditions [" + c.text + "] match no call (no numel is both >= " +
              std::to_string(c.min_numel) + " and <= " + std::to_string(c.max_numel) + ")");
    }
    return c;
  }

  void parse_numel(
      const std::string& rest, Condition& c, const std::string& item, const Line& line) {
    std::string_view cmp;
    for (std::string_view candidate : {"<=", ">=", "<", ">"}) {
      if (rest.compare(0, candidate.size(), candidate) == 0) {
        cmp = candidate;
        break;
      }
    }
    if (cmp.empty()) {
      fail(line, "malformed condition '" + item + "': numel compares with <, <=, > or >=");
    }
    const std::string digits = trim(rest.substr(cmp.size()));
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    int64_t n = 0;
    bool ok = !digits.empty() && digits.front() != '_' && digits.back() != '_' &&
              digits.find("__") == std::string::npos;
    for (char ch : digits) {
      if (ch == '_') {
        continue;
      }
      if (ch < '0' || ch > '9' || n > (kMax - (ch - '0')) / 10) {
        ok = false;
        break;
      }
      n = n * 10 + (ch - '0');
    }
    if (!ok) {
      fail(
          line,
          "malformed condition '" + item +
              "': numel is compared with a non-negative decimal integer below 2**63 (digits, "
              "optionally grouped with '_')");
    }
    if (cmp == ">=") {
      c.min_numel = std::max(c.min_numel, n);
    } else if (cmp == "<=") {
      c.max_numel = std::min(c.max_numel, n);
    } else if ((cmp == ">" && n == kMax) || (cmp == "<" && n == 0)) {
      c.min_numel = std::max<int64_t>(c.min_numel, 1); // an empty range, reported by the caller
      c.max_numel = 0;
    } else if (cmp == ">") {
      c.min_numel = std::max(c.min_numel, n + 1);
    } else {
      c.max_numel = std::min(c.max_numel, n - 1);
    }
  }

  void parse_dtypes(
      const std::string& rest, Condition& c, const std::string& item, const Line& line) {
    if (rest.empty() || rest[0] != '=' || rest.find('=', 1) != std::string::npos) {
      fail(line, "malformed condition '" + item + "': write 'dtype = <dtype>[|<dtype>...]'");
    }
    for (const std::string& name : split_trimmed(rest.substr(1), '|')) {
      bool known = options_.dtypes.empty() ? is_identifier(name) : false;
      for (const auto& d : options_.dtypes) {
        known = known || d == name;
      }
      if (!known) {
        fail(
            line,
            "unknown dtype '" + name + "' in '" + item + "'" +
                (options_.dtypes.empty() ? std::string()
                                         : "; valid dtypes: " + join(options_.dtypes)));
      }
      c.dtypes.push_back(name);
    }
  }

  void include(
      const std::string& target, const std::string& path, int number, const std::string& raw) {
    if (target.empty()) {
      fail(path, number, raw, "malformed include: expected 'include <file>'");
    }
    const std::string resolved = resolve_include(path, target);
    for (const auto& open : stack_) {
      if (normal_path(open) == resolved) {
        std::string chain;
        for (const auto& s : stack_) {
          chain += s + " -> ";
        }
        fail(path, number, raw, "include cycle: " + chain + resolved);
      }
    }
    if (static_cast<int>(stack_.size()) >= kMaxDepth) {
      fail(
          path, number, raw, "includes nested deeper than " + std::to_string(kMaxDepth) + " files");
    }
    std::optional<std::string> text;
    if (options_.read_file) {
      text = options_.read_file(resolved);
    }
    if (!text) {
      fail(
          path,
          number,
          raw,
          "cannot read included file '" + resolved + "': " + unreadable_reason(resolved));
    }
    parse(*text, resolved);
  }

  const Options& options_;
  std::vector<std::string> stack_;
  std::vector<Entry> entries_;
};

} // namespace

std::optional<std::string> canonical_op_name(const std::string& text) {
  std::string ns = "aten";
  std::string rest = text;
  if (auto colons = text.find("::"); colons != std::string::npos) {
    ns = text.substr(0, colons);
    rest = text.substr(colons + 2);
    if (!is_identifier(ns)) {
      return std::nullopt;
    }
  }
  std::string name = rest;
  std::string overload;
  if (auto dot = rest.find('.'); dot != std::string::npos) {
    name = rest.substr(0, dot);
    overload = rest.substr(dot + 1);
    if (!is_identifier(overload)) {
      return std::nullopt;
    }
    if (overload == "default") {
      overload.clear();
    }
  }
  if (!is_identifier(name)) {
    return std::nullopt;
  }
  return ns + "::" + name + (overload.empty() ? "" : "." + overload);
}

std::vector<Entry> parse_text(
    const std::string& text, const std::string& path, const Options& options) {
  Parser parser(options);
  parser.parse(text, normal_path(path));
  return parser.take();
}

std::vector<Entry> parse_file(const std::string& path, const Options& options) {
  std::optional<std::string> text;
  if (options.read_file) {
    text = options.read_file(normal_path(path));
  }
  if (!text) {
    throw ConfError(
        "cannot read routing table '" + printable(path) + "': " + unreadable_reason(path));
  }
  return parse_text(*text, path, options);
}

std::optional<std::string> read_disk_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return std::nullopt;
  }
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

} // namespace torch_fl::conf
