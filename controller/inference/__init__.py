"""The inference process's side, where torch is: its main (`process_main`), its server
(`process_server`), and the runner, which serves a torch module from the highest tier of its
ladder that passes its checks. The control side and what both processes share: controller.link.
"""
