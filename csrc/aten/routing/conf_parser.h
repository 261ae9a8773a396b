#pragma once

// The routing-table grammar (DESIGN.md section 4), parsed without torch so that a fuzzer can
// drive it on its own:
//
//   # comment                       (a `#` starts a comment anywhere on a line)
//   include <file>                  (relative to the including file; nested at most kMaxDepth)
//   <op>.<overload> = <route>       (`aten::` prefix optional; `relu` or `relu.default` for the
//                                    unnamed overload; later lines win)
//   <op>.<overload> [<cond>, ...] = <route>
//                                   (a size rule: the route of the calls that meet every
//                                    condition; <cond> is `numel <|<=|>|>= <integer>` or
//                                    `dtype = <dtype>[|<dtype>...]`)
//
// A plain line states an operator's whole route: it drops the rules earlier lines gave it.
// A rule adds to them; among an operator's rules the last one a call meets wins, and a call
// that meets none takes the plain route. What `numel` and `dtype` measure is the router's
// business (csrc/aten/routing/size_rules.h).
//
// Every problem is a ConfError naming the file, the line, the offending text and the valid
// choices. Operator names are checked by a caller-supplied callback (the dispatcher of the
// installed torch, in the library).

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace torch_fl::conf {

constexpr int kMaxDepth = 8;

struct ConfError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The conditions of a size rule, normalised: a closed numel range and a dtype set.
struct Condition {
  int64_t min_numel = 0;
  int64_t max_numel = std::numeric_limits<int64_t>::max();
  std::vector<std::string> dtypes; // empty: any dtype
  std::string text;                // canonical form, e.g. "numel >= 65536, dtype = float16"
};

struct Entry {
  std::string op;    // canonical: "aten::add.Tensor", "aten::relu" (unnamed overload)
  std::string route; // one of Options::routes
  std::string file;  // where the line is
  int line = 0;
  std::optional<Condition> when; // set for a size rule
};

struct Options {
  // The route names the grammar accepts.
  std::vector<std::string> routes;
  // The dtype names a condition may use (empty: any identifier).
  std::vector<std::string> dtypes;
  // Returns the file's text, or nullopt when it cannot be read.
  std::function<std::optional<std::string>(const std::string& path)> read_file;
  // Returns an empty string when the canonical operator name exists, else a description of
  // the valid choices. Null: names are checked for syntax only.
  std::function<std::string(const std::string& op)> check_op;
};

// Parses `text` as if it were the file `path` (includes resolve next to it).
std::vector<Entry> parse_text(
    const std::string& text, const std::string& path, const Options& options);
// Reads and parses `path` through options.read_file.
std::vector<Entry> parse_file(const std::string& path, const Options& options);

// "add.Tensor" / "aten::add.Tensor" / "relu.default" -> canonical name; nullopt if the text is
// not an operator name at all.
std::optional<std::string> canonical_op_name(const std::string& text);

// `text` safe to show in an error message: bytes that are not valid UTF-8, control bytes (all
// but newline) and the invisible byte-order mark are written as escapes (`\xff`, `\ufeff`), so
// a stray byte can neither hide nor break the message (Python decodes messages as UTF-8).
std::string printable(const std::string& text);

// Reads a file from disk (the library's Options::read_file).
std::optional<std::string> read_disk_file(const std::string& path);

} // namespace torch_fl::conf
