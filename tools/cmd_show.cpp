// `tokenfeed show`: the rows of one batch as text, with the trained positions highlighted,
// so that a person can see the mask covers exactly the assistant replies before a run.
//
// A row of T positions shows T + 1 tokens: its inputs x[0..T) and the last target y[T-1].
// Token j >= 1 is trained when the weight of position j - 1 (mask, else token_weights) is
// above 0; without either, every target is trained. Text comes from the dataset's tokenizer
// (tokenizer_state.json, as `tokenfeed prepare` records it) when it can be rebuilt, else the
// ids are printed; special tokens print as <|system|>, <|user|>, ... and a row's trailing
// padding as one <|pad|> x N.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "every_field_config.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed::cli {
namespace {

namespace fs = std::filesystem;

struct ShowOptions {
  std::string config;
  std::string split = "train";
  long batch = 0;
  long rows = 2;
  std::string html;
  std::string color = "auto";
};

// A run of tokens shown the same way.
struct Piece {
  enum class Kind : std::uint8_t { text, special, padding } kind = Kind::text;
  bool trained = false;
  std::string text;
};

// The dataset's tokenizer from tokenizer_state.json, or nullptr (with the reason in `why`)
// when there is none or it cannot be rebuilt (a pre-tokenized dataset, a moved model).
std::unique_ptr<Tokenizer> dataset_tokenizer(const fs::path& dataset_dir, std::string& why) {
  const fs::path file = dataset_dir / "tokenizer_state.json";
  std::ifstream in(file);
  if (!in) {
    why = "no tokenizer_state.json";
    return nullptr;
  }
  try {
    const nlohmann::json state = nlohmann::json::parse(in);
    const std::string kind = state.value("kind", "");
    if (kind == "pretokenized" || !state.contains("spec")) {
      why = "the dataset was pre-tokenized";
      return nullptr;
    }
    SpecialTokenStrings strings;
    const std::pair<const char*, std::string*> fields[] = {{"system", &strings.system},
                                                           {"user", &strings.user},
                                                           {"assistant", &strings.assistant},
                                                           {"tool", &strings.tool},
                                                           {"eot", &strings.eot}};
    if (const auto specials = state.find("special_tokens"); specials != state.end() && specials->is_object()) {
      for (const auto& [role, target] : fields) {
        if (const auto s = specials->find(role); s != specials->end() && s->contains("text")) {
          *target = s->at("text").get<std::string>();
        }
      }
    }
    return make_tokenizer(state.at("spec").get<std::string>(), strings);
  } catch (const std::exception& e) {
    why = std::string("its tokenizer cannot be rebuilt: ") + e.what();
    return nullptr;
  }
}

const char* special_name(const SpecialTokenIds& s, std::uint32_t id) {
  if (id == s.system) return "<|system|>";
  if (id == s.user) return "<|user|>";
  if (id == s.assistant) return "<|assistant|>";
  if (s.tool && id == *s.tool) return "<|tool|>";
  return "<|eot|>";
}

// The pieces of one row's tokens; trained[j] says whether token j is a trained target.
std::vector<Piece> pieces_of(const std::vector<std::int64_t>& tokens, const std::vector<bool>& trained,
                             const Tokenizer* tokenizer, const std::optional<SpecialTokenIds>& special,
                             std::optional<std::int64_t> pad_id) {
  std::size_t end = tokens.size();
  std::size_t padding = 0;
  if (pad_id) {
    while (end > 1 && tokens[end - 1] == *pad_id && !trained[end - 1]) --end;
    padding = tokens.size() - end;
    if (padding == 1) {  // one pad token is as likely the row's own end-of-turn
      ++end;
      padding = 0;
    }
  }
  std::vector<Piece> out;
  std::vector<std::uint32_t> run;
  bool run_trained = false;
  const auto flush = [&] {
    if (run.empty()) return;
    Piece p{Piece::Kind::text, run_trained, {}};
    if (tokenizer != nullptr) {
      try {
        p.text = tokenizer->decode(run);
      } catch (const Error&) {
        tokenizer = nullptr;  // an id the tokenizer does not know: ids from here on
      }
    }
    if (tokenizer == nullptr) {
      for (const std::uint32_t id : run) p.text += std::to_string(id) + " ";
    }
    out.push_back(std::move(p));
    run.clear();
  };
  for (std::size_t j = 0; j < end; ++j) {
    const auto id = static_cast<std::uint32_t>(tokens[j]);
    if (special && is_special_token(*special, id)) {
      flush();
      out.push_back(Piece{Piece::Kind::special, trained[j], special_name(*special, id)});
      continue;
    }
    if (!run.empty() && trained[j] != run_trained) flush();
    run_trained = trained[j];
    run.push_back(id);
  }
  flush();
  if (padding > 0) out.push_back(Piece{Piece::Kind::padding, false, "<|pad|> x " + std::to_string(padding)});
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

void show(ShowOptions o) {
  // Only warnings and errors beside the rows (on stderr): the open line would precede them.
  set_log_handler([](LogLevel level, std::string_view line) {
    if (level >= LogLevel::warning) std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  Config config = config_reading_every_field(o.config);
  config.audit_log_dir.clear();  // looking at batches is not a training run
  Loader loader(std::move(config));
  const Config& c = loader.config();
  loader.split_info(o.split);  // throws the standard error for a missing split
  for (long k = 0; k < o.batch; ++k) loader.get_batch(o.split);
  Batch b = loader.get_batch(o.split);

  std::string why;
  const std::unique_ptr<Tokenizer> tokenizer = dataset_tokenizer(c.dataset_dir, why);
  const DatasetVocabulary vocabulary = loader.vocabulary();
  std::optional<SpecialTokenIds> special = vocabulary.special_tokens;
  if (!special && tokenizer) special = tokenizer->special_ids();
  const std::optional<std::int64_t> pad_id = loader.token_ids().pad;  // the loader's own rule

  const std::size_t T = b.cols();
  const std::size_t rows = std::min<std::size_t>(static_cast<std::size_t>(o.rows), b.rows());
  const std::span<const float> weights = !b.mask().empty() ? b.mask() : b.token_weights();
  const bool colour = o.color == "always" || (o.color == "auto" && o.html.empty() && isatty(STDOUT_FILENO) == 1);

  std::string header = "split " + o.split + ", batch " + std::to_string(b.step()) + " (epoch " +
                       std::to_string(b.epoch()) + "), " + std::to_string(rows) + " of " + std::to_string(b.rows()) +
                       " rows of " + std::to_string(T) + " positions; " +
                       (tokenizer ? std::string("decoded with the dataset's tokenizer") : "token ids (" + why + ")") +
                       "; " + (weights.empty() ? "no mask: every target is trained" : "trained targets highlighted");
  std::string text = header + "\n";
  std::string html =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>tokenfeed show</title><style>"
      "body{font-family:sans-serif} pre{white-space:pre-wrap;border:1px solid #ccc;padding:6px} "
      ".t{background:#c8f7c5} .s{color:#888} .p{color:#bbb}</style></head><body>\n<p>" +
      html_escape(header) +
      "</p>\n<p>Legend: <span class=\"t\">trained target</span>, <span class=\"s\">special "
      "token</span>, <span class=\"p\">padding</span>.</p>\n";
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<std::int64_t> tokens(b.x().begin() + static_cast<std::ptrdiff_t>(r * T),
                                     b.x().begin() + static_cast<std::ptrdiff_t>((r + 1) * T));
    std::vector<bool> trained(T + 1, false);
    const std::int64_t last = b.y()[r * T + T - 1];
    if (last >= 0) tokens.push_back(last);
    for (std::size_t j = 1; j < tokens.size(); ++j) trained[j] = weights.empty() || weights[r * T + j - 1] > 0;
    trained.resize(tokens.size());
    const std::string title = "row " + std::to_string(r) + " (episode " + std::to_string(b.episode_ids()[r]) + ")";
    text += "--- " + title + "\n";
    html += "<h3>" + html_escape(title) + "</h3>\n<pre>";
    for (const Piece& p : pieces_of(tokens, trained, tokenizer.get(), special, pad_id)) {
      const bool is_special = p.kind != Piece::Kind::text;
      if (colour) {
        text += p.trained ? (is_special ? "\x1b[1;32m" : "\x1b[32m") : is_special ? "\x1b[2m" : "";
        text += p.text;
        if (p.trained || is_special) text += "\x1b[0m";
      } else {
        text += p.trained ? "[[" + p.text + "]]" : p.text;
      }
      const char* cls = p.trained                        ? "t"
                        : p.kind == Piece::Kind::special ? "s"
                        : p.kind == Piece::Kind::padding ? "p"
                                                         : "";
      html += *cls != '\0' ? "<span class=\"" + std::string(cls) + "\">" + html_escape(p.text) + "</span>"
                           : html_escape(p.text);
    }
    text += "\n";
    html += "</pre>\n";
  }
  html += "</body></html>\n";
  if (!o.html.empty()) {
    std::ofstream out(o.html, std::ios::binary | std::ios::trunc);
    out << html;
    out.close();
    if (!out) throw Error(ErrorKind::io, "cannot write '" + o.html + "'");
    std::printf("wrote %zu rows of batch %llu of %s to %s\n", rows, static_cast<unsigned long long>(b.step()),
                o.split.c_str(), o.html.c_str());
    return;
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace

void add_show_command(CLI::App& app) {
  auto options = std::make_shared<ShowOptions>();
  CLI::App* cmd = app.add_subcommand(
      "show",
      "Show rows of a batch as text (the dataset's tokenizer, else token ids) with the trained targets highlighted: "
      "ANSI colour on a terminal, [[...]] otherwise, or an HTML page with --html");
  cmd->add_option("--config", options->config, "XML config file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--split", options->split, "Split to read")
      ->check(CLI::IsMember({"train", "val"}))
      ->capture_default_str();
  cmd->add_option("--batch", options->batch, "Which batch of the run to show (0: the first)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--rows", options->rows, "How many of its rows")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--html", options->html, "Write an HTML page to this file instead");
  cmd->add_option("--color", options->color, "auto (on a terminal), always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  cmd->callback([options] { show(*options); });
}

}  // namespace tokenfeed::cli
