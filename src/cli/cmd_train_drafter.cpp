// specdec train-drafter --model M --kind eagle|medusa --out DIR [options]
// Trains an EAGLE or Medusa head on the target's own outputs (train/drafter_training.h) and
// writes DIR/head.safetensors + DIR/head.json, which the `eagle` / `medusa` drafters load
// (--set eagle_head=DIR). Rerunning the same command after an interruption continues from
// DIR/checkpoint.
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "harness/model_catalog.h"
#include "harness/train_config.h"
#include "model/causal_lm.h"
#include "train/drafter_training.h"

namespace specdec::cli {

namespace po = boost::program_options;

int cmd_train_drafter(const Args& args) {
  train::TrainOptions o;
  std::string model, dtype, config;
  std::vector<std::string> sets;
  bool json_out = false, quiet = false;
  po::options_description opts("specdec train-drafter --model M --kind eagle|medusa --out DIR [options]\n"
                               "   or: specdec train-drafter --config FILE.yaml [--set key=value ...]");
  opts.add_options()("help,h", "show this help")
      ("config", po::value(&config), "a drafter-training YAML (configs/drafters/*.yaml); its keys are these options' names "
       "with _ for -; command-line options and --set override it")
      ("set", po::value(&sets)->composing(), "override one key of --config: key=value (repeatable)")
      ("model", po::value(&model), "the target: catalog name, .gguf file or HF directory")
      ("kind", po::value(&o.kind)->default_value(o.kind), "eagle (one decoder layer over [feature, next token]) | medusa "
       "(residual heads on the last feature)")
      ("out", po::value(&o.out), "directory for head.safetensors + head.json (and checkpoint/ while training)")
      ("corpus", po::value(&o.corpus)->composing(), "training text: files or directories, repeatable (default: Python's "
       "standard library, /usr/lib/python3.*)")
      ("data", po::value(&o.data)->default_value(o.data), "text (the corpus as it is) | chat (the target's own greedy "
       "answers to questions about the corpus, in its chat template: self-distillation in the format it is "
       "prompted in)")
      ("tokens", po::value(&o.tokens)->default_value(o.tokens), "training tokens of target features")
      ("train-on", po::value(&o.train_on)->default_value(o.train_on), "train on the first sequences holding this many "
       "of the training tokens (0: all): a data-scaling point from the same stored features")
      ("held-out-tokens", po::value(&o.held_out_tokens)->default_value(o.held_out_tokens), "held-out tokens (other files)")
      ("seq-len", po::value(&o.seq_len)->default_value(o.seq_len), "tokens per training sequence")
      ("epochs", po::value(&o.epochs)->default_value(o.epochs), "passes over the training tokens")
      ("batch", po::value(&o.batch_seqs)->default_value(o.batch_seqs), "sequences per optimizer step")
      ("lr", po::value(&o.lr)->default_value(o.lr), "AdamW peak learning rate")
      ("topk", po::value(&o.topk)->default_value(o.topk), "the target's top-k tokens stored per position: the "
       "candidates of --loss-vocab topk (0: top-1 only; the loss then runs over the draft vocabulary)")
      ("d-ff", po::value(&o.d_ff)->default_value(o.d_ff), "eagle: the head's MLP width (0: the target's)")
      ("medusa-heads", po::value(&o.medusa_heads)->default_value(o.medusa_heads), "medusa: heads (draft depth)")
      ("draft-vocab", po::value(&o.draft_vocab)->default_value(o.draft_vocab), "draft from the target's N likeliest "
       "next tokens on the training data only (EAGLE-3's reduced vocabulary: a cheaper output head); 0: all")
      ("unroll", po::value(&o.unroll)->default_value(o.unroll), "eagle: also train draft depths 2..N on the head's "
       "own predicted features, as a chain drafts (EAGLE-3's training-time test); 1: depth 1 only")
      ("loss-vocab", po::value(&o.loss_vocab)->default_value(o.loss_vocab), "the token loss's softmax: topk (over the "
       "target's top-k tokens) | draft (over the whole draft vocabulary; the label remade from the stored features)")
      ("w-cls", po::value(&o.w_cls)->default_value(o.w_cls), "eagle: weight of the token loss beside the feature loss")
      ("feature-noise", po::value(&o.feature_noise)->default_value(o.feature_noise), "eagle: width of the uniform "
       "noise on the input features while training")
      ("minutes", po::value(&o.minutes)->default_value(o.minutes), "stop training after this many minutes (0: none)")
      ("seed", po::value(&o.seed)->default_value(o.seed), "initialisation, data order and noise")
      ("checkpoint-every", po::value(&o.checkpoint_s)->default_value(o.checkpoint_s), "seconds between training "
       "checkpoints (out/checkpoint/state.safetensors); 0: after every step")
      ("threads", po::value(&o.threads)->default_value(o.threads), "threads (0: all cores)")
      ("dtype", po::value(&dtype)->default_value("auto"), "the target's weights, as specdec generate --dtype")
      ("json", po::bool_switch(&json_out), "print the report as one JSON line")
      ("quiet", po::bool_switch(&quiet), "no progress line");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    fail(e.what(), " (see specdec train-drafter --help)");
  }
  if (vm.count("help")) {
    std::cout << opts << "\nexample: specdec train-drafter --model smollm2-135m --kind eagle --out heads/smollm2-eagle\n"
                         "then:    specdec generate --model smollm2-135m --strategy speculative --set drafter=eagle "
                         "--set eagle_head=heads/smollm2-eagle --prompt \"...\"\n";
    return 0;
  }
  if (!config.empty()) {
    // The file first, then what the command line gave explicitly.
    harness::TrainConfig c = harness::load_train_config(config, sets);
    const auto given = [&](const char* key) { return vm.count(key) && !vm[key].defaulted(); };
    if (!given("model")) model = c.model;
    if (!given("dtype")) dtype = c.dtype;
    train::TrainOptions from_file = c.options;
    for (const char* key : {"kind", "out", "corpus", "data", "tokens", "train-on", "held-out-tokens", "seq-len",
                            "epochs", "batch", "lr", "topk", "d-ff", "medusa-heads", "draft-vocab", "unroll",
                            "loss-vocab", "w-cls", "feature-noise", "minutes", "seed", "threads", "checkpoint-every"})
      if (given(key)) harness::apply_train_option(from_file, key, o);
    o = from_file;
  } else {
    SD_CHECK(sets.empty(), "train-drafter: --set needs --config");
  }
  SD_CHECK(!model.empty(), "train-drafter: --model is required (see specdec train-drafter --help)");
  SD_CHECK(!o.out.empty(), "train-drafter: --out DIR is required (where the head is written)");
  model::ModelSpec spec = harness::resolve_model(model);
  spec.dtype = dtype;
  spec.threads = o.threads;
  const model::LoadedModel m = model::load(spec);
  SD_CHECK(m.tokenizer != nullptr, "train-drafter: model '", model, "' has no tokenizer to read the corpus with");
  o.target_name = model;
  o.progress = !quiet;
  const train::TrainReport r = train::train_drafter(m.model, m.tokenizer, o);
  if (json_out) {
    nlohmann::json j = {{"head", o.out},
                        {"kind", o.kind},
                        {"train_tokens", r.train_tokens},
                        {"held_out_tokens", r.held_out_tokens},
                        {"steps", r.steps},
                        {"seconds_features", r.seconds_features},
                        {"seconds_training", r.seconds_training},
                        {"held_out_top1_untrained", r.untrained.top1},
                        {"held_out_top1", r.trained.top1},
                        {"held_out_top1_per_head", r.trained.top1_per_head},
                        {"draft_vocab_coverage", r.draft_vocab_coverage},
                        {"resumed_at_step", r.resumed_at_step},
                        {"sequences_from_disk", r.sequences_from_disk},
                        {"held_out_loss_untrained", r.untrained.loss},
                        {"held_out_loss", r.trained.loss}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("%s head -> %s: %lld training tokens, %lld steps; held-out top-1 agreement %.3f (untrained %.3f), "
                "loss %.3f (untrained %.3f); features %.0f s, training %.0f s\n",
                o.kind.c_str(), o.out.c_str(), static_cast<long long>(r.train_tokens), static_cast<long long>(r.steps),
                r.trained.top1, r.untrained.top1, r.trained.loss, r.untrained.loss, r.seconds_features,
                r.seconds_training);
  }
  return 0;
}

}  // namespace specdec::cli
