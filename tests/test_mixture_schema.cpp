// The mixture's schema (src/config/mixture_schema, stage_list): the XML's <mixture> and the
// records a Python mapping becomes are read by the same functions, into the same Config and
// with the same messages, each naming the record and the key.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/mixture_schema.hpp"
#include "config/stage_list.hpp"
#include "test_support.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"

using namespace tokenfeed;
using tokenfeed::test::error_of;

namespace {

Config parse(const std::string& mixture) {
  return parse_config_xml("<training><batch_size>4</batch_size><block_size>8</block_size>" + mixture + "</training>",
                          "/base");
}

std::string xml_error(const std::string& mixture) {
  return error_of([&] { validate_config(parse(mixture)); });
}

// What a mapping's `mixture` and `stages` lists become (python/src/mixture.cpp), read by
// the schema, then checked as a loader checks a config.
std::string record_error(const std::vector<ConfigRecord>& sources, const std::vector<ConfigRecord>& stages) {
  return error_of([&] {
    Config c = parse("");
    set_mixture_sources(c, sources, "/base");
    set_mixture_stages(c, stages);
    validate_config(c);
  });
}

const ConfigRecord kChat{{{"name", "chat"}, {"dataset_dir", "chat"}, {"weight", "3"}}, {}};

}  // namespace

TEST_CASE("mixture schema: XML and records read into the same config") {
  const Config xml = parse(
      "<mixture temperature=\"0.5\" planned_steps=\"100\">"
      "<source name=\"chat\" dataset_dir=\"chat\" weight=\"auto\" max_epochs=\"2.5\" epoch_seed=\"7\"/>"
      "<source name=\" web \" dataset_dir=\"/data/web\" weight=\"auto\"/>"
      "<stage until_step=\"10\"/><stage><weight source=\"chat\"> 1 </weight><weight source=\"web\">2</weight>"
      "</stage></mixture>");
  Config records = parse("");
  set_mixture_temperature(records, "0.5");
  set_mixture_planned_steps(records, "100");
  set_mixture_sources(
      records,
      {{{{"name", "chat"}, {"dataset_dir", "chat"}, {"weight", "auto"}, {"max_epochs", "2.5"}, {"epoch_seed", "7"}},
        {}},
       {{{"name", " web "}, {"dataset_dir", "/data/web"}, {"weight", "auto"}}, {}}},
      "/base");
  set_mixture_stages(records, {{{{"until_step", "10"}}, {}}, {{}, {{"chat", " 1 "}, {"web", "2"}}}});
  CHECK(config_entries(xml) == config_entries(records));
  REQUIRE(records.mixture.size() == 2);
  CHECK(records.mixture[0].keys ==
        std::vector<std::pair<std::string, std::string>>{{"dataset_dir", "/base/chat"}, {"epoch_seed", "7"}});
  CHECK(records.mixture[0].max_epochs == 2.5);
  CHECK(records.mixture[1].name == "web");
  REQUIRE(records.stages.size() == 2);
  CHECK(records.stages[0].until_step == 10);
  CHECK_FALSE(records.stages[1].until_step.has_value());
  CHECK(records.stages[1].weights == std::vector<std::pair<std::string, std::string>>{{"chat", "1"}, {"web", "2"}});
  validate_config(records);
}

TEST_CASE("mixture schema: both doors give one message naming the record and the key") {
  const std::string chat = "<source name=\"chat\" dataset_dir=\"chat\" weight=\"3\"/>";
  // The XML's messages carry the file ("config: "), then the schema's text.
  const std::string bad_step = "mixture stage 0: config key 'until_step': expected an integer, got 'soon'";
  CHECK(xml_error("<mixture>" + chat + "<stage until_step=\"soon\"/><stage/></mixture>") == "config: " + bad_step);
  CHECK(record_error({kChat}, {{{{"until_step", "soon"}}, {}}, {}}) == bad_step);

  const std::string unknown =
      "mixture stage 1: unknown key 'until' (a stage takes until_step and its weights by source)";
  CHECK(xml_error("<mixture>" + chat + "<stage until_step=\"2\"/><stage until=\"4\"/></mixture>") ==
        "config: " + unknown);
  CHECK(record_error({kChat}, {{{{"until_step", "2"}}, {}}, {{{"until", "4"}}, {}}}) == unknown);

  CHECK(xml_error("<mixture>" + chat + "<source dataset_dir=\"web\" weight=\"1\"/></mixture>") ==
        "config: mixture source 1 has no name");
  CHECK(record_error({kChat, {{{"dataset_dir", "web"}, {"weight", "1"}}, {}}}, {}) == "mixture source 1 has no name");

  CHECK(xml_error("<mixture><source name=\"chat\" dataset_dir=\"chat\"/></mixture>") ==
        "config: mixture source 'chat' has no weight");
  CHECK(record_error({{{{"name", "chat"}, {"dataset_dir", "chat"}}, {}}}, {}) == "mixture source 'chat' has no weight");

  const std::string epochs = "mixture source 'chat': config key 'max_epochs': expected a number, got 'two'";
  CHECK(
      xml_error("<mixture><source name=\"chat\" dataset_dir=\"chat\" weight=\"auto\" max_epochs=\"two\"/></mixture>") ==
      "config: " + epochs);
  CHECK(record_error({{{{"name", "chat"}, {"dataset_dir", "chat"}, {"weight", "auto"}, {"max_epochs", "two"}}, {}}},
                     {}) == epochs);

  CHECK(record_error({{{{"name", "chat"}, {"dataset_dir", "chat"}, {"weight", "1"}, {"weight", "2"}}, {}}}, {}) ==
        "mixture source 'chat': key 'weight' is given twice");
  CHECK(xml_error("<mixture temperature=\"warm\">" + chat + "</mixture>") ==
        "config: config key 'mixture_temperature': expected a number, got 'warm'");
  // Validation is after parsing, the same for both: the source by name, the stage by index.
  const std::string missing = "mixture stage 0: a weight names source 'code', which the mixture does not declare";
  CHECK(xml_error("<mixture>" + chat + "<stage><weight source=\"code\">1</weight></stage></mixture>") == missing);
  CHECK(record_error({kChat}, {{{}, {{"code", "1"}}}}) == missing);
}

TEST_CASE("stage list: until_step and the ends' rule, for any schedule") {
  std::vector<std::string> other;
  const auto keep = [&](std::size_t i, const std::string& where, const std::string& key, const std::string& text) {
    other.push_back(std::to_string(i) + " " + where + " " + key + "=" + text);
  };
  const auto ends = read_stage_ends("shape", {{{{"until_step", " 5 "}, {"block_size", "512"}}, {}}, {}}, keep);
  CHECK(ends == std::vector<std::optional<std::int64_t>>{5, std::nullopt});
  CHECK(other == std::vector<std::string>{"0 shape stage 0 block_size=512"});
  CHECK(error_of([&] {
          read_stage_ends("shape", {{{{"until_step", "1"}, {"until_step", "2"}}, {}}}, keep);
        }) == "shape stage 0: key 'until_step' is given twice");
  validate_stage_end("shape", 0, 2, 5, std::nullopt);
  validate_stage_end("shape", 1, 2, std::nullopt, 5);
  CHECK(error_of([] { validate_stage_end("shape", 0, 2, std::nullopt, std::nullopt); }) ==
        "shape stage 0 has no until_step; only the last stage may omit it");
  CHECK(error_of([] { validate_stage_end("shape", 1, 2, 7, 5); }) ==
        "shape stage 1 is the last stage and has until_step=7; the last stage holds for ever, remove until_step");
  CHECK(error_of([] { validate_stage_end("shape", 1, 3, 5, 5); }) ==
        "shape stage 1: until_step=5 must be greater than 5 (the stage's first step)");
}
