// Trained drafters on SmolLM2-135M: the tests of tests/support/trained_drafters_cases.h on the
// real model and its corpus (heavy: training its heads takes minutes; the same tests run on a
// tiny model in tests/unit/test_train_heads_tiny.cpp), and the chat data, which needs a chat
// template.
//  - Training on SmolLM2's corpus at this budget: an untrained EAGLE head's predicted feature is
//    about the embedding of the token it was fed (~0 agreement), trained ~0.2. Medusa's first
//    head guesses the token after next from one feature: 0.037 untrained, 0.066 trained, 0.036
//    with the planted early labels (1016 held-out positions: a standard error of ~0.007). Its
//    margin of 0.01 puts the bar 19 positions below the trained head and 11 above the planted
//    one; 0.02 left the trained head 9 positions (1.2 standard errors) above it.
//  - The law check: 4 outcomes after its prompt, N = 600 (~45 s a drafter). The planted residual
//    bug moves the law by TV ~0.1 here: at the same N it fails with p ~1e-8 (at N = 150 p was
//    0.01-0.05, too close to the level). The prompt is code, which the heads were trained on:
//    they draft tokens the target accepts there, so rejections land where q overlaps p and the
//    residual (the planted bug's target) matters.
// ctest-heavy: *
// Four heavy entries, each in a shard of its own and each training the heads its tests reach (on
// a Zen 1 EPYC: ~116 s for the target's features, ~30 s a head; as one entry the file took
// ~6 min on an AMD EPYC, its law checks alone ~10 min on a 2.0 GHz Intel Xeon):
//  - test_harness_trained_drafters_smollm2_law: the EAGLE chain's law check and the planted
//    residual bug (the EAGLE head);
//  - _law_trees: the tree's and Medusa's law checks (both heads);
//  - _training: the planted off-by-ones in training (both planted heads), the chat data, one
//    thread and two (no trained head);
//  - the rest keeps the file's name (both heads). It took 575 s alone on the Zen 1 EPYC when
//    every entry trained all four heads, 480 s with two.
// ctest-heavy-part: law Kind/TrainedDrafterHeavy.SamplingFollowsTheExactProcessedLaw/eagle:Kind/TrainedDrafterHeavy.APlantedResidualBugFailsTheLawCheck/*
// ctest-heavy-part: law_trees Kind/TrainedDrafterHeavy.SamplingFollowsTheExactProcessedLaw/eagle_tree:Kind/TrainedDrafterHeavy.SamplingFollowsTheExactProcessedLaw/medusa_static
// ctest-heavy-part: training TrainedDrafters.APlantedOffByOne*:TrainedDrafters.ChatDataIsTheTargetsOwnGreedyAnswers:TrainedDrafters.TheHeadIsTheSameAtOneThreadAndTwo
#include "tests/support/smollm2.h"
#include "tests/support/trained_drafters_cases.h"

using specdec::testing_support::smollm2;

const specdec::testing_support::TrainedTarget& tut() {
  static const specdec::testing_support::TrainedTarget t = [] {
    specdec::testing_support::TrainedTarget t;
    t.model = smollm2().model;
    t.tokenizer = smollm2().tokenizer;
    t.name = "smollm2-135m";
    t.medusa_margin = 0.01;  // see the top
    const train::Corpus c = train::read_corpus(train::default_corpus(), *t.tokenizer, t.seq_len, 12288, 1024);
    t.train = c.train;
    t.held_out = c.held_out;
    const auto encode = [&](const char* s) { return t.tokenizer->encode(s, true); };
    const char* const stack = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):";
    t.prompts = {encode("import os\n\ndef list_python_files(root):\n    "), encode(stack),
                 encode("The three laws of thermodynamics are")};
    t.batch_prompts = {encode("import os\n\ndef list_python_files(root):\n    "), encode("def add(a, b):"),
                       encode(stack), encode("# Sort a list of numbers\nnumbers = [3, 1, 2]\n")};
    t.law_prompt = encode("class Point:\n    def __init__(self");
    return t;
  }();
  return t;
}

namespace {

INSTANTIATE_TEST_SUITE_P(Kind, TrainedDrafter, ::testing::Values("eagle", "medusa", "eagle_vocab", "eagle_tree", "eagle_static",
                                                                   "medusa_tree", "medusa_static"),
                         [](const auto& info) { return info.param; });
// The heavy tier runs the law and batch checks on three kinds that between them reach every
// verification path (the chain with q, the dynamic tree verified tokens_only, multi-draft on a
// static tree with Medusa's q), both heads' features in batches, and the planted bug through the
// EAGLE chain; the other kinds run under the label "slow" (the ctest entry
// test_harness_trained_drafters_smollm2_slow, scripts/test.sh --slow).
// ctest-slow: Slow/TrainedDrafterHeavy.*
INSTANTIATE_TEST_SUITE_P(Kind, TrainedDrafterHeavy, ::testing::Values("eagle", "eagle_tree", "medusa_static"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Slow, TrainedDrafterHeavy, ::testing::Values("medusa", "eagle_vocab", "eagle_static", "medusa_tree"),
                         [](const auto& info) { return info.param; });

// data = chat: a conversation about the corpus text, no longer than the corpus sequence, whose
// every assistant turn is exactly the target's greedy answer to the conversation before it.
// 256-token sequences: a conversation goes on past its first answer (its text re-encoded).
TEST(TrainedDrafters, ChatDataIsTheTargetsOwnGreedyAnswers) {
  const tokenizer::Tokenizer& tok = *smollm2().tokenizer;
  const int64_t len = tut().seq_len;
  const train::Corpus c = train::read_corpus(train::default_corpus(), tok, 2 * len, 4 * len, 2 * len);
  const std::vector<Tokens> conv = train::chat_sequences(c.train, smollm2().model, smollm2().tokenizer);
  ASSERT_EQ(conv.size(), c.train.size());
  int64_t answers = 0, questions = 0;
  for (size_t i = 0; i < conv.size(); ++i) {
    EXPECT_LE(conv[i].size(), c.train[i].size());
    const std::string text = tok.decode(conv[i]);
    // The turns, as the ChatML text shows them (the template's own system turn left out).
    std::vector<tokenizer::ChatMessage> turns;
    for (size_t at = text.find("<|im_start|>"); at != std::string::npos; at = text.find("<|im_start|>", at + 1)) {
      const size_t nl = text.find('\n', at), end = text.find("<|im_end|>", nl);
      ASSERT_NE(nl, std::string::npos) << text;
      const std::string role = text.substr(at + 12, nl - at - 12);
      if (role != "system") turns.push_back({role, text.substr(nl + 1, std::min(end, text.size()) - nl - 1)});
    }
    for (size_t k = 0; k < turns.size(); ++k) {
      questions += turns[k].role == "user";
      if (turns[k].role != "assistant") continue;
      Request req = request({});
      req.prompt = tok.encode(tok.apply_chat_template({turns.begin(), turns.begin() + k}, true), true);
      ASSERT_LT(req.prompt.size(), conv[i].size()) << text;
      ASSERT_TRUE(std::equal(req.prompt.begin(), req.prompt.end(), conv[i].begin())) << "turn " << k << ":\n" << text;
      req.stop.max_new_tokens = static_cast<int64_t>(conv[i].size() - req.prompt.size());
      req.stop.eos_ids = tok.eos_ids();
      const Result want = create("greedy", Params(std::map<std::string, std::string>{}))->generate(req, {});
      const size_t n = std::min(want.tokens.size(), conv[i].size() - req.prompt.size());
      EXPECT_EQ(Tokens(conv[i].begin() + req.prompt.size(), conv[i].begin() + req.prompt.size() + n),
                Tokens(want.tokens.begin(), want.tokens.begin() + n))
          << "sequence " << i << ", turn " << k << ":\n" << text;
      ++answers;
    }
  }
  std::printf("%lld questions, %lld answers in %zu conversations\n", static_cast<long long>(questions),
              static_cast<long long>(answers), conv.size());
  EXPECT_GE(answers, static_cast<int64_t>(conv.size()));
  EXPECT_GT(questions, answers);  // a conversation went on after an answer
}

// A head trained at 1 thread and at 2 is the same bit for bit: a step's sequences run side by
// side on the pool, each on one thread, and their gradients are added in sequence order, so
// neither the threads nor the mode parallel::Step picks under load changes the head. LibTorch's
// own threads split its reductions by thread (a planted at::set_num_threads(2) in train_head's
// TrainingThreads fails here). SmolLM2, not the tiny model: the tiny model's operations are too
// small for LibTorch to split. 2 steps over 8 sequences, a few seconds.
TEST(TrainedDrafters, TheHeadIsTheSameAtOneThreadAndTwo) {
  model::CausalLM& target = *tut().model;
  train::Dataset data;
  for (size_t i = 0; i < 8; ++i) data.push_back(train::target_features(target, tut().train.at(i), tut().topk));
  train::TrainOptions o = options("eagle");
  o.epochs = 1;
  std::vector<model::DraftHead> heads;
  for (const int threads : {1, 2}) {
    o.threads = threads;
    heads.push_back(train::new_head(target, o));
    train::train_head(heads.back(), target, data, o, "");
  }
  model::DraftHead fresh = train::new_head(target, o);
  ASSERT_EQ(heads[0].params().size(), heads[1].params().size());
  bool trained = false;
  for (const auto& [name, p] : heads[0].params()) {
    const at::Tensor& q = heads[1].params().at(name);
    EXPECT_TRUE(at::equal(p, q)) << name << ": max |difference| " << (p - q).abs().max().item<double>();
    trained = trained || !at::equal(p, fresh.params().at(name));
  }
  EXPECT_TRUE(trained) << "the steps changed no parameter";
}

}  // namespace
