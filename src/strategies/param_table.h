#pragma once
// Typed parameters, declared once (DESIGN: resolve a config entry once into a typed value).
// A strategy or a drafter keeps its parameters in a struct and lists each field once in a
// ParamTable: its name, its default (as text, as `specdec strategies` shows it), its help and
// the member it fills. From that one list come the ParamSpecs that the registry checks and
// shows (StrategyInfo::params, DrafterInfo::params) and the parser that resolve() runs once;
// the factories then read the struct (Params::typed<T>()), never the text.
//
//   struct NgramParams { int64_t min = 0, max = 0; };
//   const ParamTable<NgramParams> table = ParamTable<NgramParams>()
//       .field("ngram_min", &NgramParams::min, "1", "shortest suffix matched")
//       .field("ngram_max", &NgramParams::max, "3", "longest suffix matched")
//       .finish([](NgramParams& p) { SD_CHECK(p.min >= 1, ...); });
//   declare_params(info, table);  // info.params and info.parse
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "strategies/strategy.h"

namespace specdec::strategies {

template <class T>
class ParamTable {
 public:
  // A field read as its member's type: int64_t ("int"), double ("float"), bool ("bool") or
  // std::string ("string"), with the registry's named errors for text that does not parse.
  template <class M>
  ParamTable& field(std::string name, M T::*member, std::string default_value, std::string help) {
    static_assert(std::is_same_v<M, int64_t> || std::is_same_v<M, double> || std::is_same_v<M, bool> ||
                      std::is_same_v<M, std::string>,
                  "a plain field is int64_t, double, bool or std::string; give others a parse function");
    const std::string key = name;
    fields_.push_back({{std::move(name), type_name<M>(), std::move(default_value), std::move(help)},
                       [member, key](T& out, const Params& p) { out.*member = read_as<M>(p, key); }});
    return *this;
  }
  // A field whose text `parse` turns into its member (a list, a mode); shown as a "string".
  template <class M, class Parse>
  ParamTable& field(std::string name, M T::*member, std::string default_value, std::string help, Parse parse) {
    const std::string key = name;
    fields_.push_back({{std::move(name), "string", std::move(default_value), std::move(help)},
                       [member, key, parse](T& out, const Params& p) { out.*member = parse(p.get_string(key)); }});
    return *this;
  }
  // A parameter in the schema that no member holds (the structured-output keys, which resolve()
  // parses into Params::constraint).
  ParamTable& text(std::string name, std::string default_value, std::string help) {
    fields_.push_back({{std::move(name), "string", std::move(default_value), std::move(help)}, nullptr});
    return *this;
  }
  // Run after every field is read: range checks and checks across fields (a specdec::Error
  // naming the parameters), and members derived from several fields.
  ParamTable& finish(std::function<void(T&)> f) {
    finish_ = std::move(f);
    return *this;
  }

  std::vector<ParamSpec> specs() const {
    std::vector<ParamSpec> out;
    for (const auto& f : fields_) out.push_back(f.spec);
    return out;
  }
  // The struct from resolved text (every field set); fields in declaration order, then finish.
  T parse(const Params& resolved) const {
    T out{};
    for (const auto& f : fields_)
      if (f.read) f.read(out, resolved);
    if (finish_) finish_(out);
    return out;
  }

 private:
  struct Field {
    ParamSpec spec;
    std::function<void(T&, const Params&)> read;  // null: text only
  };
  template <class M>
  static std::string type_name() {
    if constexpr (std::is_same_v<M, int64_t>) return "int";
    else if constexpr (std::is_same_v<M, double>) return "float";
    else if constexpr (std::is_same_v<M, bool>) return "bool";
    else return "string";
  }
  template <class M>
  static M read_as(const Params& p, const std::string& key) {
    if constexpr (std::is_same_v<M, int64_t>) return p.get_int(key);
    else if constexpr (std::is_same_v<M, double>) return p.get_float(key);
    else if constexpr (std::is_same_v<M, bool>) return p.get_bool(key);
    else return p.get_string(key);
  }

  std::vector<Field> fields_;
  std::function<void(T&)> finish_;
};

// A strategy's or drafter's parameters from its table: info.params (the schema resolve()
// checks and `specdec strategies` shows) and info.parse (resolve() keeps the parsed struct in
// Params::typed<T>()). Info is StrategyInfo or DrafterInfo.
template <class Info, class T>
void declare_params(Info& info, ParamTable<T> table) {
  info.params = table.specs();
  info.parse = [table = std::move(table)](Params& resolved) { resolved.set_typed(table.parse(resolved)); };
}

}  // namespace specdec::strategies
